package provider

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// clientStatus is the HTTP status the client API answers GET /v1/models
// with, authenticated by key.
func clientStatus(t *testing.T, c accCluster, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.Client+"/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s/models: %v", c.Client, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func apiKeyHCL(rpm int) string {
	return fmt.Sprintf(`resource "llmgw_project" "p" {
  name = "team-k"
}

resource "llmgw_api_key" "k" {
  project    = llmgw_project.p.name
  name       = "ci"
  expires_at = "2099-01-01T00:00:00Z"
  rpm        = %d
}
`, rpm)
}

// keySecret reads the secret of llmgw_api_key.k from the state.
func keySecret(s *terraform.State) (id, plain string, err error) {
	rs, ok := s.RootModule().Resources["llmgw_api_key.k"]
	if !ok {
		return "", "", fmt.Errorf("llmgw_api_key.k is not in the state")
	}
	return rs.Primary.ID, rs.Primary.Attributes["secret"], nil
}

// waitRevoked waits until key is refused by the client API: revocation takes
// effect within seconds (the gateway caches keys briefly).
func waitRevoked(t *testing.T, c accCluster, what, key string) {
	t.Helper()
	testcluster.WaitFor(t, what+" to be refused", 20*time.Second, func() (bool, string) {
		code := clientStatus(t, c, key)
		return code == http.StatusUnauthorized, fmt.Sprintf("GET /v1/models answers %d", code)
	})
}

// TestAccAPIKey walks create (the secret is in state once and works against
// the client API) → import by id (without the secret) → an rpm change in
// place → an empty plan → a name change that replaces the key (the old one is
// revoked) → destroy (revoked).
func TestAccAPIKey(t *testing.T) {
	c := newAccCluster(t, "")
	var first string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			waitRevoked(t, c, "the first key after destroy", first)
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: c.providerBlock() + apiKeyHCL(5),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_api_key.k", tfjsonpath.New("secret"), knownvalue.StringRegexp(regexp.MustCompile(`^llmgw-[a-z2-7]{52}$`))),
					statecheck.ExpectKnownValue("llmgw_api_key.k", tfjsonpath.New("prefix"), knownvalue.StringRegexp(regexp.MustCompile(`^llmgw-[a-z2-7]{6}$`))),
					statecheck.ExpectKnownValue("llmgw_api_key.k", tfjsonpath.New("rpm"), knownvalue.Int64Exact(5)),
				},
				Check: func(s *terraform.State) error {
					id, plain, err := keySecret(s)
					if err != nil {
						return err
					}
					first = plain
					if !strings.HasPrefix(plain, s.RootModule().Resources["llmgw_api_key.k"].Primary.Attributes["prefix"]) {
						return fmt.Errorf("secret does not start with its prefix")
					}
					if code := clientStatus(t, c, plain); code != http.StatusOK {
						return fmt.Errorf("key %s answers %d on the client API, want 200", id, code)
					}
					return nil
				},
			},
			{
				// The secret cannot be imported: everything else matches.
				ResourceName: "llmgw_api_key.k", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"secret"},
				ImportStateCheck: func(states []*terraform.InstanceState) error {
					if len(states) != 1 {
						return fmt.Errorf("imported %d instances", len(states))
					}
					if s, ok := states[0].Attributes["secret"]; ok && s != "" {
						return fmt.Errorf("an imported key has a secret in state")
					}
					return nil
				},
			},
			{
				Config: c.providerBlock() + apiKeyHCL(7),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_api_key.k", plancheck.ResourceActionUpdate),
				}},
				Check: func(s *terraform.State) error {
					_, plain, err := keySecret(s)
					if err != nil {
						return err
					}
					if plain != first {
						return fmt.Errorf("an rpm change must keep the key and its secret in state")
					}
					return nil
				},
			},
			{Config: c.providerBlock() + apiKeyHCL(7), PlanOnly: true},
			{
				Config: c.providerBlock() + strings.Replace(apiKeyHCL(7), `"ci"`, `"ci-2"`, 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_api_key.k", plancheck.ResourceActionReplace),
				}},
				Check: func(s *terraform.State) error {
					_, plain, err := keySecret(s)
					if err != nil {
						return err
					}
					if plain == first || plain == "" {
						return fmt.Errorf("a replaced key must have a new secret")
					}
					waitRevoked(t, c, "the replaced key", first)
					return nil
				},
			},
		},
	})
}

// TestAccAPIKeyWriteOnly runs the write-only flow with the real terraform
// CLI and reads the state file itself: a secret given in secret_wo (a
// variable here, so the test knows it) works against the client API and
// appears nowhere in the state; a key fed by the ephemeral
// llmgw_api_key_secret leaves no secret in the state either; changing
// secret_wo_version replaces the key.
func TestAccAPIKeyWriteOnly(t *testing.T) {
	c := newAccCluster(t, "")
	tf := testcluster.NewTerraform(t, c.Cluster)
	main := `terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}

provider "llmgw" {}

variable "secret" {
  type      = string
  sensitive = true
  ephemeral = true
}

variable "version_number" {
  type = number
}

resource "llmgw_api_key" "given" {
  name              = "given"
  secret_wo         = var.secret
  secret_wo_version = var.version_number
}

ephemeral "llmgw_api_key_secret" "s" {}

resource "llmgw_api_key" "generated" {
  name              = "generated"
  secret_wo         = ephemeral.llmgw_api_key_secret.s.secret
  secret_wo_version = 1
}
`
	if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	tf.Run(0, "init", "-input=false")
	apply := func(plain string, version int) {
		t.Helper()
		tf.Run(0, "apply", "-auto-approve", "-input=false", "-var", "secret="+plain, "-var", fmt.Sprintf("version_number=%d", version))
	}
	checkState := func(plain string) {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(tf.Dir, "terraform.tfstate"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), plain) || strings.Contains(string(raw), spec.HashSecret(plain)) {
			t.Fatal("the state file holds the write-only secret or its hash")
		}
		if m := regexp.MustCompile(`llmgw-[a-z2-7]{52}`).Find(raw); m != nil {
			t.Fatal("the state file holds an API key secret")
		}
		if !strings.Contains(string(raw), `"secret_wo": null`) || strings.Count(string(raw), `"secret": null`) != 2 {
			t.Fatalf("secret and secret_wo must be null in the state:\n%s", raw)
		}
	}

	plain, prefix, _ := spec.NewAPIKey()
	apply(plain, 1)
	checkState(plain)
	if code := clientStatus(t, c, plain); code != http.StatusOK {
		t.Fatalf("the write-only secret answers %d on the client API, want 200", code)
	}
	keys, err := c.ManageClient().ListApiKeys(context.Background(), &managev1.ListApiKeysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*managev1.ApiKey{}
	for _, k := range keys.GetKeys() {
		byName[k.GetName()] = k
	}
	if byName["given"].GetPrefix() != prefix || byName["generated"] == nil {
		t.Fatalf("keys = %v: want given with prefix %s, and generated", keys.GetKeys(), prefix)
	}

	// Same version, new ephemeral value: nothing changes.
	out, _ := tf.Run(0, "plan", "-input=false", "-detailed-exitcode", "-var", "secret="+plain, "-var", "version_number=1")
	if !strings.Contains(out, "No changes") {
		t.Fatalf("a second plan is not empty:\n%s", testcluster.Tail(out, 30))
	}

	// Rotation: a new secret with a new version replaces the key.
	rotated, _, _ := spec.NewAPIKey()
	apply(rotated, 2)
	checkState(rotated)
	if code := clientStatus(t, c, rotated); code != http.StatusOK {
		t.Fatalf("the rotated secret answers %d, want 200", code)
	}
	waitRevoked(t, c, "the old secret after rotation", plain)
	tf.Run(0, "destroy", "-auto-approve", "-input=false", "-var", "secret="+rotated, "-var", "version_number=2")
}
