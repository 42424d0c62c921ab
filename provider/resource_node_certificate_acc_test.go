package provider

import (
	"context"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/llmgw/llmgw/pki"
)

// pkiProviderBlock configures the provider for the cluster with its CA as
// the pki attribute.
func (c accCluster) pkiProviderBlock() string {
	return fmt.Sprintf(`provider "llmgw" {
  endpoint     = %q
  token        = %q
  ca_cert_file = %q
  pki = {
    ca_cert_file = %q
    ca_key_file  = %q
  }
}
`, c.Manage, c.Token, filepath.Join(c.PKIDir, "ca.pem"), filepath.Join(c.PKIDir, "ca.pem"), filepath.Join(c.PKIDir, "ca-key.pem"))
}

func nodeCertHCL(validity, early int) string {
	return fmt.Sprintf(`resource "llmgw_node_certificate" "n" {
  node_name           = "gpu-07"
  validity_hours      = %d
  early_renewal_hours = %d
}
`, validity, early)
}

// TestAccNodeCertificate signs a certificate (CN gpu-07, verifying against
// the cluster's CA), shows that a plan within early_renewal_hours of
// not_after proposes a new one, that changing early_renewal_hours alone
// updates in place when renewal is not due, and that import is refused.
func TestAccNodeCertificate(t *testing.T) {
	c := newAccCluster(t, "")
	addr := "llmgw_node_certificate.n"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: c.pkiProviderBlock() + nodeCertHCL(2, 0),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("ready_for_renewal"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("not_after"), knownvalue.StringRegexp(regexp.MustCompile(`^\d{4}-\d\d-\d\dT`))),
				},
				Check: func(s *terraform.State) error {
					attrs := s.RootModule().Resources[addr].Primary.Attributes
					cert, err := pki.ParseCertificate([]byte(attrs["cert_pem"]))
					if err != nil {
						return err
					}
					if cert.Subject.CommonName != "gpu-07" {
						return fmt.Errorf("CN = %q, want gpu-07", cert.Subject.CommonName)
					}
					pool, err := pki.LoadCertPool(filepath.Join(c.PKIDir, "ca.pem"))
					if err != nil {
						return err
					}
					if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
						return fmt.Errorf("certificate does not verify against the cluster's CA: %w", err)
					}
					if _, err := pki.ParsePrivateKey([]byte(attrs["private_key_pem"])); err != nil {
						return fmt.Errorf("private_key_pem: %w", err)
					}
					return nil
				},
			},
			{
				// Renewal not due (2 h left, 1 h early window): in place.
				Config: c.pkiProviderBlock() + nodeCertHCL(2, 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
			},
			{
				// An early window longer than what is left: replacement.
				Config:             c.pkiProviderBlock() + nodeCertHCL(2, 3),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
					expectReplacedBy{addr, "ready_for_renewal"},
				}},
			},
			{
				ResourceName:  addr,
				ImportState:   true,
				ImportStateId: "gpu-07",
				ExpectError:   regexp.MustCompile(`cannot be imported`),
			},
		},
	})
}

// expectReplacedBy checks that a planned replacement of resource is caused
// by attribute.
type expectReplacedBy struct{ resource, attribute string }

func (e expectReplacedBy) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != e.resource {
			continue
		}
		for _, p := range rc.Change.ReplacePaths {
			if steps, ok := p.([]any); ok && len(steps) == 1 && steps[0] == e.attribute {
				return
			}
		}
		resp.Error = fmt.Errorf("%s is replaced because of %v, want %s", e.resource, rc.Change.ReplacePaths, e.attribute)
		return
	}
	resp.Error = fmt.Errorf("%s is not in the plan", e.resource)
}
