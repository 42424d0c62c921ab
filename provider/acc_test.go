package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

// binary is the llmgw binary the acceptance tests start clusters with; built
// once in TestMain when TF_ACC is set.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if !tfacc.Enabled() {
		if tfacc.CI() {
			// resource.Test skips without TF_ACC: under CI every
			// acceptance test would pass by skipping.
			fmt.Fprintln(os.Stderr, tfacc.Missing())
			return 1
		}
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "llmgw-provider-acc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if binary, err = testcluster.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The machine's TF_CLI_CONFIG_FILE names a file that does not exist.
	cli := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(cli, nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv("TF_CLI_CONFIG_FILE", cli)
	return m.Run()
}

// factories serve the provider in-process to the real terraform.
var factories = map[string]func() (tfprotov6.ProviderServer, error){
	"llmgw": providerserver.NewProtocol6WithError(New("test")()),
}

// accCluster is a control plane with agents for one acceptance test.
type accCluster struct {
	*testcluster.Cluster
}

// newAccCluster skips the test without TF_ACC, else starts a control plane
// whose server.yaml declares models (YAML list items) and the given
// agents.
func newAccCluster(t *testing.T, models string, nodes ...testcluster.NodeSpec) accCluster {
	t.Helper()
	tfacc.Require(t)
	if models == "" {
		models = "  []\n"
	}
	c := testcluster.New(t, binary, "10s", models)
	for _, n := range nodes {
		c.StartAgent(n)
	}
	return accCluster{c}
}

// providerBlock configures the provider for the cluster.
func (c accCluster) providerBlock() string {
	return fmt.Sprintf(`provider "llmgw" {
  endpoint     = %q
  token        = %q
  ca_cert_file = %q
}
`, c.Manage, c.Token, filepath.Join(c.PKIDir, "ca.pem"))
}
