// Command terraform-provider-llmgw is the Terraform provider for llmgw: it
// serves the provider in package provider over Terraform's plugin protocol 6.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/provider"
)

func main() {
	debug := flag.Bool("debug", false, "run the provider for a debugger: it prints TF_REATTACH_PROVIDERS for terraform to use")
	flag.Parse()
	quietSDKLogs()
	tuneGC()
	err := providerserver.Serve(context.Background(), provider.New(buildinfo.Version()), providerserver.ServeOpts{
		Address:         provider.Address,
		Debug:           *debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		slog.Error("serving the provider", "err", err)
		os.Exit(1)
	}
}

// quietSDKLogs turns off the plugin SDK's own trace logging unless the user
// asked for logs. Terraform shows provider logs only when TF_LOG or
// TF_LOG_PROVIDER is set, yet without this the framework writes (and
// terraform parses, then drops) tens of thousands of trace lines per plan:
// about 1.5 s of a 200-model plan on a 2-core machine.
func quietSDKLogs() {
	for _, v := range []string{"TF_LOG", "TF_LOG_PROVIDER", "TF_LOG_SDK", "TF_LOG_SDK_FRAMEWORK", "TF_LOG_SDK_PROTO"} {
		if os.Getenv(v) != "" {
			return
		}
	}
	_ = os.Setenv("TF_LOG_SDK", "OFF")
}

// gcPercent is the provider's GOGC unless the environment sets one. The
// provider lives for one terraform command and keeps little: most of what
// it allocates is the framework's per-call conversion of values between
// Terraform's types and the schema's, garbage at once. At Go's default
// (100) collecting it was about a third of the provider's CPU in a
// 200-model plan; at 400 it is a third less CPU, for a peak RSS of about
// 135 MB instead of 60 MB.
const gcPercent = 400

// gcMemoryLimit bounds the heap softly when the environment sets no
// GOMEMLIMIT, so that a very large catalog collects more often instead of
// growing the heap by gcPercent.
const gcMemoryLimit = 512 << 20

// tuneGC applies gcPercent and gcMemoryLimit where GOGC and GOMEMLIMIT
// leave them to the program.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(gcMemoryLimit)
	}
}
