package provider

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

func mirrorWeightsHCL(mirror, version, source, timeout string) string {
	return fmt.Sprintf(`resource "llmgw_mirror_weights" "w" {
  mirror  = %q
  model   = "m"
  version = %q
  source  = %q
  timeout = %q
}
`, mirror, version, source, timeout)
}

// TestAccMirrorWeights runs a real `llmgw mirror serve` with mutual TLS on
// the cluster's CA and walks create (apply waits for the download; the
// file is in the mirror) → import with verify → a timeout change in place →
// an empty plan; a source that answers 404 fails apply with the mirror's
// error; destroy deletes the version from the mirror.
func TestAccMirrorWeights(t *testing.T) {
	c := newAccCluster(t, "")
	old := mirrorPoll
	mirrorPoll = 50 * time.Millisecond
	t.Cleanup(func() { mirrorPoll = old })

	up, upstream := weightsrv.New(t)
	data := weightsrv.RandomBytes(300<<10, 61)
	up.Files["up/v/w.gguf"] = data
	source := upstream.URL + "/up/v/w.gguf"

	dir := filepath.Join(t.TempDir(), "mirror")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(t.TempDir(), "mirror-tls")
	cert, key, err := pki.IssueServer(c.PKIDir, "mirror", []string{"127.0.0.1"}, certs, 0)
	if err != nil {
		t.Fatal(err)
	}
	ports := testcluster.FreePorts(t, 2)
	bytesAddr, manageAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	testcluster.Start(t, binary, "mirror", "mirror", "serve", "--dir", dir, "--base", "http://"+bytesAddr,
		"--bytes-addr", bytesAddr, "--manage-addr", manageAddr,
		"--tls-ca", filepath.Join(c.PKIDir, "ca.pem"), "--tls-cert", cert, "--tls-key", key)
	testcluster.WaitFor(t, "the mirror's management listener", 20*time.Second, func() (bool, string) {
		conn, err := net.Dial("tcp", manageAddr)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	mirror := "https://" + manageAddr
	provider := fmt.Sprintf(`provider "llmgw" {
  endpoint     = %q
  token        = %q
  ca_cert_file = %q
  pki = {
    ca_cert_file = %q
    ca_key_file  = %q
  }
}
`, c.Manage, c.Token, filepath.Join(c.PKIDir, "ca.pem"), filepath.Join(c.PKIDir, "ca.pem"), filepath.Join(c.PKIDir, "ca-key.pem"))
	held := filepath.Join(dir, "m", "v1", "w.gguf")

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			if _, err := os.Stat(filepath.Join(dir, "m", "v1")); !os.IsNotExist(err) {
				return fmt.Errorf("m/v1 is still in the mirror after destroy: %w", err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: provider + mirrorWeightsHCL(mirror, "v1", source, "5m"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_mirror_weights.w", tfjsonpath.New("id"), knownvalue.StringExact("m/v1")),
					statecheck.ExpectKnownValue("llmgw_mirror_weights.w", tfjsonpath.New("bytes"), knownvalue.Int64Exact(int64(len(data)))),
					statecheck.ExpectKnownValue("llmgw_mirror_weights.w", tfjsonpath.New("files"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("w.gguf")})),
					statecheck.ExpectKnownValue("llmgw_mirror_weights.w", tfjsonpath.New("url"), knownvalue.StringExact("http://"+bytesAddr+"/m/v1/")),
				},
				Check: func(*terraform.State) error {
					got, err := os.ReadFile(held)
					if err != nil || string(got) != string(data) {
						return fmt.Errorf("the mirror does not hold the source's bytes at %s (%w)", held, err)
					}
					return nil
				},
			},
			{
				ResourceName:      "llmgw_mirror_weights.w",
				ImportState:       true,
				ImportStateId:     mirror + "/m/v1",
				ImportStateVerify: true,
				// The import knows no timeout but the default.
				ImportStateVerifyIgnore: []string{"timeout"},
			},
			{
				Config: provider + mirrorWeightsHCL(mirror, "v1", source, "30m"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("llmgw_mirror_weights.w", plancheck.ResourceActionUpdate)},
				},
			},
			{
				Config:   provider + mirrorWeightsHCL(mirror, "v1", source, "30m"),
				PlanOnly: true,
			},
			{
				Config: provider + mirrorWeightsHCL(mirror, "v1", source, "30m") + `resource "llmgw_mirror_weights" "missing" {
  mirror  = "` + mirror + `"
  model   = "m"
  version = "v2"
  source  = "` + upstream.URL + `/up/v/typo.gguf"
}
`,
				ExpectError: regexp.MustCompile(`(?s)Downloading m/v2 into the mirror failed.*404`),
			},
		},
	})
	if up.Count("up/v/w.gguf") != 1 {
		t.Errorf("the source served %d copies, want 1", up.Count("up/v/w.gguf"))
	}
}
