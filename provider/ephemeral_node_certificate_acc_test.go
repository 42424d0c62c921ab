package provider

import (
	"crypto/ecdsa"
	"crypto/x509"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/testkit/pvefake"
)

// keylessVMHCL is VM 142 booted with user-data that carries a certificate
// and key from the ephemeral llmgw_node_certificate, through the write-only
// user_data_wo.
func keylessVMHCL(version string) string {
	return fmt.Sprintf(`ephemeral "llmgw_node_certificate" "n" {
  node_name      = "gpu-142"
  validity_hours = 48
}

resource "llmgw_proxmox_vm" "n" {
  name                  = "gpu-142"
  target_node           = %q
  clone_from            = "ubuntu-2404"
  address               = "10.0.0.142/24"
  wait_for_registration = false
  drain_timeout         = "0s"
  user_data_wo          = "#cloud-config\n# cert\n${ephemeral.llmgw_node_certificate.n.cert_pem}# key\n${ephemeral.llmgw_node_certificate.n.private_key_pem}"
  user_data_wo_version  = %q
}
`, pvefake.DefaultNode, version)
}

// TestAccNodeCertificateEphemeral boots a VM with a certificate and key
// that never reach the state: the ISO's user-data holds a key that matches
// a certificate of CN gpu-142 signed by the CA, the state holds neither the
// key nor the user-data, a second plan (which signs another certificate) is
// empty, and a new user_data_wo_version replaces the VM with a new key.
func TestAccNodeCertificateEphemeral(t *testing.T) {
	s := newPVEFake(t)
	dir := t.TempDir()
	caCert, caKey, err := pki.InitCA(dir, pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prov := fmt.Sprintf("provider \"llmgw\" {\n  endpoint = \"127.0.0.1:1\"\n  token    = \"unused\"\n  pki = {\n    ca_cert_file = %q\n    ca_key_file  = %q\n  }\n%s}\n",
		caCert, caKey, pveBlock(t, s))
	caPEM, err := os.ReadFile(caCert)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	bootedKey := func(*terraform.State) error {
		ud, err := s.ISOFile(pvefake.DefaultNode, "local:iso/llmgw-cidata-142.iso", "user-data")
		if err != nil {
			return err
		}
		certPEM, keyPEM, ok := strings.Cut(strings.TrimPrefix(ud, "#cloud-config\n# cert\n"), "# key\n")
		if !ok {
			return fmt.Errorf("user-data on the ISO is not the configured one: %q", ud)
		}
		cert, err := pki.ParseCertificate([]byte(certPEM))
		if err != nil {
			return fmt.Errorf("certificate in the user-data: %w", err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(caPEM)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || cert.Subject.CommonName != "gpu-142" {
			return fmt.Errorf("certificate %q does not verify as a node certificate of the CA: %w", cert.Subject.CommonName, err)
		}
		key, err := pki.ParsePrivateKey([]byte(keyPEM))
		if err != nil {
			return fmt.Errorf("key in the user-data: %w", err)
		}
		if pub, ok := key.Public().(*ecdsa.PublicKey); !ok || !pub.Equal(cert.PublicKey) {
			return fmt.Errorf("the key in the user-data is not the certificate's")
		}
		keys = append(keys, keyPEM)
		return nil
	}
	noKeyInState := func(st *terraform.State) error {
		for addr, r := range st.RootModule().Resources {
			for k, v := range r.Primary.Attributes {
				if strings.Contains(v, "PRIVATE KEY") || strings.Contains(v, "#cloud-config") {
					return fmt.Errorf("%s.%s in the state holds the user-data or a private key", addr, k)
				}
				for _, key := range keys {
					if strings.Contains(v, strings.TrimSpace(key)) {
						return fmt.Errorf("%s.%s in the state holds the node's private key", addr, k)
					}
				}
			}
		}
		return nil
	}
	addr := "llmgw_proxmox_vm.n"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: prov + keylessVMHCL("1"),
				Check:  resource.ComposeTestCheckFunc(bootedKey, noKeyInState, resource.TestCheckNoResourceAttr(addr, "user_data_wo")),
			},
			{
				// Another run signs another certificate; nothing asks for it.
				Config:   prov + keylessVMHCL("1"),
				PlanOnly: true,
			},
			{
				Config: prov + keylessVMHCL("2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: resource.ComposeTestCheckFunc(bootedKey, noKeyInState, func(*terraform.State) error {
					if len(keys) != 2 || keys[0] == keys[1] {
						return fmt.Errorf("the replaced VM did not boot with a new key")
					}
					return nil
				}),
			},
			{
				Config:      prov + strings.Replace(keylessVMHCL("3"), "  user_data_wo_version  = \"3\"\n", "", 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)user_data_wo_version.*must be specified`),
			},
		},
	})
}
