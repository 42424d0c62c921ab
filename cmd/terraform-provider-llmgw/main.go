// Command terraform-provider-llmgw is the Terraform provider for llmgw: it
// serves the provider in package provider over Terraform's plugin protocol 6.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/llmgw/llmgw/provider"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run the provider for a debugger: it prints TF_REATTACH_PROVIDERS for terraform to use")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address:         provider.Address,
		Debug:           *debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		slog.Error("serving the provider", "err", err)
		os.Exit(1)
	}
}
