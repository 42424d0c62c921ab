package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

// stuckModelHCL is a model of tp GPUs whose apply waits up to 5 minutes.
func stuckModelHCL(tp int) string {
	return fmt.Sprintf(`resource "llmgw_model" "m" {
  name    = "tf-stuck"
  source  = "sim://stuck"
  scaling = { min = 1 }
  profiles = [{
    name            = "h100"
    engine          = "sim"
    gpu_class       = "h100-80g"
    tp              = %d
    startup_timeout = "1m"
  }]
  rollout_timeout = "5m"
}
`, tp)
}

// TestAccModelRolloutStalls is issue 18's tp 1 → 9 on nodes of 2 GPUs: the
// plan warns, and the apply, instead of waiting out rollout_timeout while
// the old replica keeps the model serving, fails within seconds naming the
// new generation, why no node can hold it and the replica that keeps
// serving. ctl model get shows the stuck generation. Back to tp 1, apply
// succeeds.
func TestAccModelRolloutStalls(t *testing.T) {
	c := newAccCluster(t, declaredModel, twoNodes()...)
	ctx := context.Background()
	var applyStarted time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: c.providerBlock() + stuckModelHCL(1),
				Check:  func(*terraform.State) error { applyStarted = time.Now(); return nil },
			},
			{
				Config:      c.providerBlock() + stuckModelHCL(9),
				ExpectError: regexp.MustCompile(`(?s)Rollout of model tf-stuck cannot make progress.*generation\s+\w+\s+cannot\s+be\s+placed:\s+no\s+node\s+can\s+hold\s+profile\s+h100.*needs\s+9.*replica\s+r-\w+\s+\(stale,\s+profile\s+\w+,\s+on\s+node0[12]\)\s+keeps\s+serving`),
			},
			{
				PreConfig: func() {
					if took := time.Since(applyStarted); took > 60*time.Second {
						t.Errorf("the stuck apply (with its plan) took %s, want well under rollout_timeout (5m)", took)
					}
					m, err := c.ManageClient().GetModel(ctx, &managev1.GetModelRequest{Name: "tf-stuck"})
					if err != nil {
						t.Fatal(err)
					}
					if st := m.GetStatus(); st.GetState() != "serving" || st.GetStalled() == "" || st.GetReplicasOutdated() != 1 {
						t.Errorf("status of the stuck model = %v; want serving, stalled, 1 outdated replica", st)
					}
					cmd := exec.Command(binary, "ctl", "model", "get", "tf-stuck")
					cmd.Env = append(os.Environ(), "LLMGW_ENDPOINT="+c.Manage, "LLMGW_TOKEN="+c.Token, "LLMGW_CA_CERT="+filepath.Join(c.PKIDir, "ca.pem"))
					out, err := cmd.CombinedOutput()
					if err != nil || !strings.Contains(string(out), "# rollout stuck: generation "+m.GetGeneration()+" cannot be placed") || !strings.Contains(string(out), "tp: 9") {
						t.Errorf("llmgw ctl model get tf-stuck: %v\n%s\nwant the stuck generation shown", err, out)
					}
				},
				Config: c.providerBlock() + stuckModelHCL(1),
			},
		},
	})
}

// hangingModelHCL is a sim model whose profile passes args; with
// "--world-size", "2" (and a rendezvous address) on a one-node profile its
// engine waits for a worker that never joins, so it never answers its
// health check.
func hangingModelHCL(args string) string {
	return fmt.Sprintf(`resource "llmgw_model" "m" {
  name    = "tf-hang"
  source  = "sim://hang"
  scaling = { min = 1 }
  profiles = [{
    name            = "h100"
    engine          = "sim"
    gpu_class       = "h100-80g"
    tp              = 1
    startup_timeout = "25s"
    args            = %s
  }]
  rollout_timeout = "5m"
}
`, args)
}

// TestAccModelRolloutNotReady: an args edit whose replacement is placed but
// never becomes ready is not held to how long the previous args took to
// start (a new build may load longer: a larger model, a longer context):
// no "not becoming ready" before its startup_timeout (25s) fails it; apply
// then fails naming the replica, its shard and the engine's last output,
// well before rollout_timeout (5m), while the old replica keeps serving.
// Back to the old args, apply succeeds. (Before builds were told apart, it
// failed as "not becoming ready" 10s after it was placed, against a start
// of the old args.)
func TestAccModelRolloutNotReady(t *testing.T) {
	c := newAccCluster(t, declaredModel, twoNodes()...)
	ctx := context.Background()
	var applyStarted time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: c.providerBlock() + hangingModelHCL(`["--decode-tps", "1000"]`),
				Check:  func(*terraform.State) error { applyStarted = time.Now(); return nil },
			},
			{
				Config:      c.providerBlock() + hangingModelHCL(`["--world-size", "2", "--dist-init-addr", "127.0.0.1:0"]`),
				ExpectError: regexp.MustCompile(`(?s)Rollout of model tf-hang failed.*Replica\s+r-\w+\s+\(profile\s+h100\)\s+failed:.*not\s+ready\s+after\s+25s.*Last\s+engine\s+output:.*waiting\s+for\s+workers`),
			},
			{
				PreConfig: func() {
					took := time.Since(applyStarted)
					if took < 25*time.Second || took > 90*time.Second {
						t.Errorf("the apply of a replacement that never becomes ready (with its plan) failed after %s, want at its startup_timeout (25s), well under rollout_timeout (5m)", took)
					}
					t.Logf("plan and apply of a replacement that never becomes ready failed after %s", took.Round(100*time.Millisecond))
					m, err := c.ManageClient().GetModel(ctx, &managev1.GetModelRequest{Name: "tf-hang"})
					if err != nil {
						t.Fatal(err)
					}
					if st := m.GetStatus(); st.GetReplicasReady() != 1 || st.GetStalledReason() == "not_ready" {
						t.Errorf("status of the model = %v; want the old replica serving and no not_ready stall", st)
					}
				},
				Config: c.providerBlock() + hangingModelHCL(`["--decode-tps", "1000"]`),
			},
		},
	})
}
