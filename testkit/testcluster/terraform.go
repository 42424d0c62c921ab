package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Terraform runs the real terraform CLI against a cluster, with the llmgw
// provider built from this tree and installed from a local mirror (no
// registry is reached), configured from LLMGW_* variables like a CI job.
type Terraform struct {
	t   testing.TB
	Bin string
	// Dir is the working directory (a fresh temporary one).
	Dir string
	Env []string
}

// NewTerraform skips the test unless TF_ACC is set, builds the provider into
// a filesystem mirror and returns a runner for cluster c.
func NewTerraform(t testing.TB, c *Cluster) *Terraform {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("needs the real terraform: set TF_ACC=1 (and TF_ACC_TERRAFORM_PATH)")
	}
	bin := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("terraform"); err != nil {
			t.Fatalf("finding terraform: %v (set TF_ACC_TERRAFORM_PATH)", err)
		}
	}
	build := t.TempDir()
	mirror := filepath.Join(build, "mirror")
	plugin := filepath.Join(mirror, "registry.terraform.io", "llmgw", "llmgw", "0.0.1", runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-llmgw_v0.0.1")
	cmd := exec.Command("go", "build", "-o", plugin, "github.com/llmgw/llmgw/cmd/terraform-provider-llmgw")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the provider: %v\n%s", err, out)
	}
	rc := filepath.Join(build, "terraformrc")
	cfg := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path    = %q\n    include = [\"llmgw/llmgw\"]\n  }\n  direct {\n    exclude = [\"llmgw/llmgw\"]\n  }\n}\n", mirror)
	if err := os.WriteFile(rc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	tf := &Terraform{t: t, Bin: bin, Dir: t.TempDir()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LLMGW_") && !strings.HasPrefix(kv, "TF_") {
			tf.Env = append(tf.Env, kv)
		}
	}
	tf.Env = append(tf.Env,
		"TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1",
		"LLMGW_ENDPOINT="+c.Manage, "LLMGW_TOKEN="+c.Token, "LLMGW_CA_CERT="+filepath.Join(c.PKIDir, "ca.pem"))
	return tf
}

// Run runs terraform in Dir, fails the test unless it exits with want, and
// returns its output and how long it took.
func (tf *Terraform) Run(want int, args ...string) (string, time.Duration) {
	tf.t.Helper()
	out, took, _ := tf.RunCPU(want, args...)
	return out, took
}

// RunCPU is Run that also returns the CPU time terraform used, the
// providers it started and waited for included: on a shared machine it
// varies much less with the load than the wall time.
func (tf *Terraform) RunCPU(want int, args ...string) (string, time.Duration, time.Duration) {
	tf.t.Helper()
	cmd := exec.Command(tf.Bin, args...)
	cmd.Dir, cmd.Env = tf.Dir, tf.Env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		tf.t.Fatalf("running terraform %s: %v", strings.Join(args, " "), err)
	}
	if code != want {
		tf.t.Fatalf("terraform %s exited %d, want %d:\n%s", strings.Join(args, " "), code, want, Tail(string(out), 60))
	}
	return string(out), took, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// In returns a runner like tf in another fresh working directory: a second
// configuration against the same cluster, with its own state.
func (tf *Terraform) In(dir string) *Terraform {
	c := *tf
	c.Dir = dir
	return &c
}
