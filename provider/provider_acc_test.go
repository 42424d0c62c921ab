package provider

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestAccProviderErrors: a wrong token and an unreachable endpoint end in a
// diagnostic that says what to check; an empty provider block works from the
// environment.
func TestAccProviderErrors(t *testing.T) {
	c := newAccCluster(t, "", testcluster.NodeSpec{ID: "node01", GPUs: 1})
	ca := filepath.Join(c.PKIDir, "ca.pem")
	unreachable := "127.0.0.1:" + fmt.Sprint(testcluster.FreePorts(t, 1)[0])
	nodes := `data "llmgw_nodes" "all" {}`
	tests := []struct {
		name     string
		endpoint string
		token    string
		want     string
	}{
		{name: "wrong token", endpoint: c.Manage, token: "not-the-token", want: `(?s)refused the admin token.*LLMGW_TOKEN`},
		{name: "unreachable endpoint", endpoint: unreachable, token: c.Token, want: `(?s)Cannot reach the llmgw control plane.*` + regexp.QuoteMeta(unreachable) + `.*is\s+running`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config:      fmt.Sprintf("provider \"llmgw\" {\n  endpoint = %q\n  token = %q\n  ca_cert_file = %q\n}\n%s\n", tt.endpoint, tt.token, ca, nodes),
					ExpectError: regexp.MustCompile(tt.want),
				}},
			})
		})
	}
	t.Run("empty provider block from the environment", func(t *testing.T) {
		t.Setenv(EnvEndpoint, c.Manage)
		t.Setenv(EnvToken, c.Token)
		t.Setenv(EnvCACert, ca)
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: factories,
			Steps: []resource.TestStep{{
				Config: "provider \"llmgw\" {}\n" + nodes,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.llmgw_nodes.all", tfjsonpath.New("nodes").AtSliceIndex(0).AtMapKey("id"), knownvalue.StringExact("node01")),
				},
			}},
		})
	})
}
