package ctl

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/manageapi"
)

// startManage serves the real management service over TLS with its own
// admin-token check, on a SQLite store with two models ("big" priced,
// "small" at the default price), and returns the ctl environment and the
// running API.
func startManage(t *testing.T) (map[string]string, *manageapi.API) {
	t.Helper()
	big := spec.Model{Name: "big", Source: "sim://b", Scaling: spec.Scaling{Max: 1}, Pricing: &spec.Pricing{PromptPer1K: 1, CompletionPer1K: 2},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}
	small := big
	small.Name, small.Source, small.Pricing = "small", "sim://s", nil
	api := manageapi.Start(t, manageapi.Options{Models: []spec.Model{big, small}, TokenName: "ctl-test",
		DefaultPrice: &spec.Pricing{PromptPer1K: 0.1, CompletionPer1K: 0.2}, Now: func() time.Time { return testNow }})
	return map[string]string{EnvEndpoint: api.Addr, EnvToken: api.AdminToken, EnvCACert: api.CAFile}, api
}

// mustCtl runs ctl and fails unless it exits with want.
func mustCtl(t *testing.T, env map[string]string, want int, args ...string) (string, string) {
	t.Helper()
	code, out, errOut := runCtl(t, env, args...)
	if code != want {
		t.Fatalf("llmgw ctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out, errOut
}

func TestProjectsCommands(t *testing.T) {
	env, _ := startManage(t)
	out, _ := mustCtl(t, env, exitOK, "projects", "create", "team-a", "--rpm", "60", "--allow", "big,small")
	if out != "created project team-a: rpm 60, tpm default\n" {
		t.Fatalf("create said %q", out)
	}
	out, _ = mustCtl(t, env, exitOK, "projects", "update", "team-a", "--tpm", "5000")
	if out != "updated project team-a: rpm 60, tpm 5000\n" {
		t.Fatalf("update said %q (rpm must be kept)", out)
	}
	mustCtl(t, env, exitOK, "projects", "update", "team-a", "--threads-retain-hours", "24")
	// 2^32+24 hours would wrap to 24 in the API's int32: refused.
	if _, errOut := mustCtl(t, env, exitUsage, "projects", "update", "team-a", "--threads-retain-hours", "4294967320"); !strings.Contains(errOut, "from 0 to 87600") {
		t.Fatalf("a retention past ten years: %q", errOut)
	}
	out, _ = mustCtl(t, env, exitOK, "projects", "update", "team-a", "--allow", "big,nope")
	if !strings.Contains(out, `warning: allowed model "nope" is not in the catalog`) {
		t.Fatalf("update with an unknown model said %q", out)
	}
	out, _ = mustCtl(t, env, exitOK, "projects")
	want := `PROJECT  RPM      TPM      MODELS    KEYS  THREADS  MEMORY
default  default  default  all       0     off      off
team-a   60       5000     big,nope  0     24h      off
team-a: warning: allowed model "nope" is not in the catalog
`
	if out != want {
		t.Fatalf("projects table:\n%s\nwant:\n%s", out, want)
	}
	out, _ = mustCtl(t, env, exitOK, "projects", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || list[1]["name"] != "team-a" || list[1]["rpm"] != "60" {
		t.Fatalf("projects --json = %s (%v)", out, err)
	}
	_, errOut := mustCtl(t, env, exitError, "projects", "create", "team-a")
	if !strings.Contains(errOut, `project "team-a" already exists`) {
		t.Fatalf("duplicate create said %q", errOut)
	}
	mustCtl(t, env, exitOK, "keys", "create", "ci", "--project", "team-a")
	_, errOut = mustCtl(t, env, exitError, "projects", "delete", "team-a")
	if !strings.Contains(errOut, `deleting project team-a`) || !strings.Contains(errOut, "revoke them first") {
		t.Fatalf("deleting a project with a key said %q", errOut)
	}
	_, errOut = mustCtl(t, env, exitUsage, "projects", "create")
	if !strings.Contains(errOut, "missing the project name") {
		t.Fatalf("create without a name said %q", errOut)
	}
}

// TestProjectsAllowEmptyEntries: --allow ",,," once meant "every model"
// without a word. An empty entry is refused, naming the flag and the value,
// and nothing is sent; --allow "" still means every model.
func TestProjectsAllowEmptyEntries(t *testing.T) {
	env, _ := startManage(t)
	mustCtl(t, env, exitOK, "projects", "create", "team-a", "--allow", "big")
	for _, tt := range []struct{ value, entry string }{{",,,", "1"}, {"big,,small", "2"}, {"big,", "2"}, {" , big", "1"}} {
		for _, verb := range []string{"create", "update"} {
			_, errOut := mustCtl(t, env, exitUsage, "projects", verb, "team-a", "--allow", tt.value)
			want := fmt.Sprintf(`--allow %q: entry %s is empty`, tt.value, tt.entry)
			if !strings.Contains(errOut, want) || !strings.Contains(errOut, `--allow ""`) {
				t.Errorf("projects %s --allow %q said %q, want %q and how to allow every model", verb, tt.value, errOut, want)
			}
		}
	}
	out, _ := mustCtl(t, env, exitOK, "projects")
	if !strings.Contains(out, "team-a   default  default  big ") {
		t.Fatalf("team-a changed by a refused --allow:\n%s", out)
	}
	out, _ = mustCtl(t, env, exitOK, "projects", "update", "team-a", "--allow", "")
	if !strings.Contains(out, "updated project team-a") {
		t.Fatalf("--allow \"\" said %q", out)
	}
	out, _ = mustCtl(t, env, exitOK, "projects")
	if !strings.Contains(out, "team-a   default  default  all ") {
		t.Fatalf(`--allow "" must allow every model:\n%s`, out)
	}
}

func TestKeysCommands(t *testing.T) {
	env, api := startManage(t)
	out, _ := mustCtl(t, env, exitOK, "keys", "create", "ci", "--expires", "30d", "--rpm", "10")
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "in project default. This is the only time it is shown") {
		t.Fatalf("create said %q", out)
	}
	plain := strings.TrimSpace(lines[2])
	k, err := api.LookupKey(plain)
	if err != nil {
		t.Fatalf("the printed secret %q is not a stored key: %v", plain, err)
	}
	if k.RPM != 10 || k.ExpiresAt == nil || !k.ExpiresAt.Equal(testNow.Add(30*24*time.Hour)) {
		t.Fatalf("stored key = %+v (rpm 10, expires in 30 days)", k)
	}
	// Listing never shows the secret.
	out, _ = mustCtl(t, env, exitOK, "keys")
	if strings.Contains(out, plain) || !strings.Contains(out, k.Prefix+"…") || !strings.Contains(out, "active") {
		t.Fatalf("keys table:\n%s", out)
	}
	out, _ = mustCtl(t, env, exitOK, "keys", "--json")
	if strings.Contains(out, plain) || strings.Contains(out, k.Hash) || !strings.Contains(out, `"id": "`+k.ID+`"`) {
		t.Fatalf("keys --json:\n%s", out)
	}
	out, _ = mustCtl(t, env, exitOK, "keys", "update", k.ID, "--tpm", "900")
	if out != "key "+k.ID+" (ci): rpm 10, tpm 900\n" {
		t.Fatalf("update said %q (rpm must be kept)", out)
	}
	out, _ = mustCtl(t, env, exitOK, "keys", "revoke", k.ID)
	if !strings.Contains(out, "revoked "+k.ID) {
		t.Fatalf("revoke said %q", out)
	}
	if out, _ := mustCtl(t, env, exitOK, "keys"); strings.Contains(out, k.ID) {
		t.Fatalf("a revoked key is listed without --all:\n%s", out)
	}
	if out, _ := mustCtl(t, env, exitOK, "keys", "--all"); !strings.Contains(out, "revoked") {
		t.Fatalf("keys --all:\n%s", out)
	}
	_, errOut := mustCtl(t, env, exitUsage, "keys", "create", "x", "--expires", "soon")
	if !strings.Contains(errOut, `--expires "soon"`) {
		t.Fatalf("bad --expires said %q", errOut)
	}
	_, errOut = mustCtl(t, env, exitError, "keys", "create", "x", "--project", "ghost")
	if !strings.Contains(errOut, `project "ghost" does not exist`) {
		t.Fatalf("unknown project said %q", errOut)
	}
}

func TestBudgetsPricesUsageCommands(t *testing.T) {
	env, api := startManage(t)
	api.AddUsage(t,
		manageapi.Usage{At: testNow.Add(-26 * time.Hour), Project: "default", KeyID: "key-1", Model: "big", Status: 200, PromptTokens: 100, CompletionTokens: 50, Cost: 0.2, Latency: time.Second},
		manageapi.Usage{At: testNow.Add(-time.Hour), Project: "default", KeyID: "key-1", Model: "big", Status: 200, PromptTokens: 1000, CompletionTokens: 500, Cost: 2},
		manageapi.Usage{At: testNow.Add(-time.Hour), Project: "default", Model: "small", Status: 402},
	)
	out, _ := mustCtl(t, env, exitOK, "budgets", "set", "default", "--period", "day", "--amount", "5", "--fallback", "small")
	if !strings.HasPrefix(out, "budget default/day: amount 5, 2 spent this period; when spent: fallback to small (allowance 0, 0 used)\n") ||
		!strings.Contains(out, `warning: budget default/day: fallback model "small" has a price and fallback_allowance is 0`) {
		t.Fatalf("budgets set said %q", out)
	}
	out, _ = mustCtl(t, env, exitOK, "budgets", "set", "default", "--period", "day", "--amount", "1.5", "--fallback", "small", "--fallback-allowance", "1.25")
	if out != "budget default/day: amount 1.5, 2 spent this period; when spent: fallback to small (allowance 1.25, 0.5 used)\n" {
		t.Fatalf("budgets set said %q", out)
	}
	out, _ = mustCtl(t, env, exitOK, "budgets")
	want := `PROJECT  PERIOD  AMOUNT  SPENT  RESETS                WHEN SPENT
default  day     1.5     2      2026-12-01T00:00:00Z  fallback to small (allowance 1.25, 0.5 used)
`
	if out != want {
		t.Fatalf("budgets table:\n%s\nwant:\n%s", out, want)
	}
	for amount, shown := range map[string]string{"NaN": "NaN", "Inf": "+Inf", "-1": "-1"} {
		_, errOut := mustCtl(t, env, exitUsage, "budgets", "set", "default", "--period", "day", "--amount", amount)
		if !strings.Contains(errOut, "--amount "+shown+": must be a finite number of at least 0") {
			t.Fatalf("--amount %s said %q", amount, errOut)
		}
	}
	_, errOut := mustCtl(t, env, exitUsage, "budgets", "set", "default", "--period", "day", "--amount", "1", "--fallback", "small", "--fallback-allowance", "-2")
	if !strings.Contains(errOut, "--fallback-allowance -2: must be a finite number of at least 0") {
		t.Fatalf("negative --fallback-allowance said %q", errOut)
	}
	_, errOut = mustCtl(t, env, exitError, "budgets", "set", "default", "--period", "day", "--amount", "1", "--fallback-allowance", "2")
	if !strings.Contains(errOut, "fallback_allowance: is only used when on_exhausted is fallback") {
		t.Fatalf("--fallback-allowance without a fallback said %q", errOut)
	}
	_, errOut = mustCtl(t, env, exitError, "budgets", "set", "default", "--period", "week", "--amount", "1")
	if !strings.Contains(errOut, `period: "week" is not a period`) {
		t.Fatalf("bad period said %q", errOut)
	}
	_, errOut = mustCtl(t, env, exitError, "budgets", "set", "default", "--period", "day", "--amount", "1", "--fallback", "tiny")
	if !strings.Contains(errOut, `fallback_model: model "tiny" is not in the catalog`) {
		t.Fatalf("unknown fallback said %q", errOut)
	}
	_, errOut = mustCtl(t, env, exitUsage, "budgets", "set", "default", "--period", "day")
	if !strings.Contains(errOut, "--amount is required") {
		t.Fatalf("missing amount said %q", errOut)
	}
	mustCtl(t, env, exitOK, "budgets", "delete", "default", "--period", "day")
	if out, _ := mustCtl(t, env, exitOK, "budgets", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("budgets after delete = %s", out)
	}

	out, _ = mustCtl(t, env, exitOK, "prices")
	want = `default price (auth.default_price): prompt 0.1, completion 0.2 per 1k tokens

MODEL  PROMPT/1K  COMPLETION/1K  FROM
big    1          2              model
small  0.1        0.2            default
`
	if out != want {
		t.Fatalf("prices:\n%s\nwant:\n%s", out, want)
	}

	out, _ = mustCtl(t, env, exitOK, "usage")
	want = `PROJECT  MODEL  REQUESTS  PROMPT  COMPLETION  COST
default  big    2         1100    550         2.2
default  small  1         0       0           0
`
	if out != want {
		t.Fatalf("usage:\n%s\nwant:\n%s", out, want)
	}
	out, _ = mustCtl(t, env, exitOK, "usage", "--model", "big", "--by-day")
	want = `DAY         PROJECT  MODEL  REQUESTS  PROMPT  COMPLETION  COST
2026-11-29  default  big    1         100     50          0.2
2026-11-30  default  big    1         1000    500         2
`
	if out != want {
		t.Fatalf("usage --by-day:\n%s\nwant:\n%s", out, want)
	}
	out, _ = mustCtl(t, env, exitOK, "usage", "--since", "24h", "--json")
	var totals []map[string]any
	if err := json.Unmarshal([]byte(out), &totals); err != nil || len(totals) != 2 {
		t.Fatalf("usage --since 24h --json = %s (%v)", out, err)
	}
	out, _ = mustCtl(t, env, exitOK, "usage", "--rows", "--limit", "2")
	if n := strings.Count(out, "\n"); n != 3 || !strings.Contains(out, "key-1") {
		t.Fatalf("usage --rows --limit 2 printed %d lines:\n%s", n, out)
	}
	_, errOut = mustCtl(t, env, exitUsage, "usage", "--since", "yesterday")
	if !strings.Contains(errOut, `--since "yesterday"`) {
		t.Fatalf("bad --since said %q", errOut)
	}
}

// TestModelAddWarnsAboveTheFleet: model add stores a model whose scaling.min
// the fleet cannot hold and prints the management API's warning naming what
// it can hold.
func TestModelAddWarnsAboveTheFleet(t *testing.T) {
	env, _ := startManage(t)
	file := filepath.Join(t.TempDir(), "many.yaml")
	def := "name: many\nsource: sim://many\nscaling: {min: 1000}\nprofiles:\n- {name: h100, engine: sim, gpu_class: h100-80g, tp: 1}\n"
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := mustCtl(t, env, exitOK, "model", "add", "-f", file)
	want := "warning: scaling.min 1000: the fleet can hold at most 0 replicas of model many now (no node can hold one now); the other 1000 stay unplaced until nodes join or free up\n"
	if !strings.HasPrefix(out, "created model many") || !strings.HasSuffix(out, want) {
		t.Fatalf("model add said %q, want the warning %q", out, want)
	}
}
