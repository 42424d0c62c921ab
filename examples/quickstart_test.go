package examples

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

// TestQuickstartTerraform runs examples/quickstart as its README says:
// `llmgw dev` in one process, then terraform init and apply with the
// environment of its env file. The apply must adopt the three dev nodes and
// serve the model "mine", a second plan must be empty (the imported nodes'
// configuration matches what their agents run), the model must answer an
// OpenAI client, and llmgw dev must stop cleanly on SIGINT.
func TestQuickstartTerraform(t *testing.T) {
	tfacc.Require(t)
	if testing.Short() {
		t.Skip("starts llmgw dev and terraform")
	}
	binary, err := testcluster.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "dev")
	envPath := filepath.Join(dir, "env")
	dev := testcluster.Start(t, binary, "llmgw dev", "dev", "--dir", dir, "--port-base", strconv.Itoa(testcluster.DevPortBase(t)))
	testcluster.WaitFor(t, "llmgw dev to write "+envPath, 90*time.Second, func() (bool, string) {
		select {
		case <-dev.Done:
			t.Fatalf("llmgw dev exited:\n%s", testcluster.Tail(dev.Output(), 30))
		default:
		}
		_, err := os.Stat(envPath)
		return err == nil, testcluster.Tail(dev.Output(), 3)
	})
	env := readDevEnv(t, envPath)

	tf := testcluster.NewTerraform(t, &testcluster.Cluster{
		Manage: env["LLMGW_ENDPOINT"], Token: env["LLMGW_TOKEN"], PKIDir: filepath.Dir(env["LLMGW_CA_CERT"]),
	})
	tfFiles, err := filepath.Glob("quickstart/*.tf")
	if err != nil || len(tfFiles) == 0 {
		t.Fatalf("quickstart/*.tf: %v (found %d files)", err, len(tfFiles))
	}
	for _, f := range tfFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tf.Dir, filepath.Base(f)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	tf.Run(0, "init", "-input=false")
	// The first plan imports the nodes; their declarations must equal what
	// the agents run, so that apply changes nothing but declaring them.
	planOut, _ := tf.Run(2, "plan", "-input=false", "-no-color", "-detailed-exitcode", "-out=tfplan", "-var", "dev_dir="+dir)
	// README.md quotes this line.
	if want := "Plan: 3 to import, 5 to add, 3 to change, 0 to destroy."; !strings.Contains(planOut, want) {
		t.Errorf("the first plan lacks %q:\n%s", want, testcluster.Tail(planOut, 40))
	}
	planJSON, _ := tf.Run(0, "show", "-json", "tfplan")
	checkImportedNodesUnchanged(t, planJSON)
	out, _ := tf.Run(0, "apply", "-input=false", "-no-color", "-auto-approve", "-var", "dev_dir="+dir)
	for _, want := range []string{"3 imported", "llmgw_model.mine: Creation complete"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, testcluster.Tail(out, 40))
		}
	}
	tf.Run(0, "plan", "-input=false", "-detailed-exitcode", "-var", "dev_dir="+dir)
	curl, _ := tf.Run(0, "output", "-raw", "curl")
	if !strings.Contains(curl, `"model": "mine"`) || !strings.Contains(curl, "$OPENAI_BASE_URL") {
		t.Errorf("output curl = %q, want a request to model mine at $OPENAI_BASE_URL", curl)
	}

	client := openai.NewClient(option.WithBaseURL(env["OPENAI_BASE_URL"]), option.WithAPIKey(env["OPENAI_API_KEY"]), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "mine",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	})
	if err != nil {
		t.Fatalf("chat request to mine: %v", err)
	}
	if len(resp.Choices) == 0 || resp.Choices[0].Message.Content == "" || resp.Model != "mine" {
		t.Fatalf("chat response from mine: model %q, %d choices: %+v", resp.Model, len(resp.Choices), resp.Choices)
	}

	// The team's key works, sees only its project's model, and is charged.
	teamKey, _ := tf.Run(0, "output", "-raw", "team_api_key")
	team := openai.NewClient(option.WithBaseURL(env["OPENAI_BASE_URL"]), option.WithAPIKey(strings.TrimSpace(teamKey)), option.WithMaxRetries(0))
	models, err := team.Models.List(ctx)
	if err != nil {
		t.Fatalf("listing models with the team key: %v", err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "mine" {
		t.Errorf("the team key sees %+v, want only mine", models.Data)
	}
	if _, err := team.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "mine",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}); err != nil {
		t.Fatalf("chat request with the team key: %v", err)
	}

	// Issue 18: sim-2node spans node01 and node02, the only nodes of ib-a,
	// so a drain of node01 cannot finish: ctl says so at once, naming the
	// replica and the scheduler's reason, and the node keeps serving.
	ctl := func(args ...string) ([]byte, error) {
		cmd := exec.Command(binary, append([]string{"ctl"}, args...)...)
		cmd.Env = append(os.Environ(), "LLMGW_ENDPOINT="+env["LLMGW_ENDPOINT"], "LLMGW_TOKEN="+env["LLMGW_TOKEN"], "LLMGW_CA_CERT="+env["LLMGW_CA_CERT"])
		return cmd.CombinedOutput()
	}
	start := time.Now()
	drainOut, err := ctl("drain", "node01")
	if err == nil || !strings.Contains(string(drainOut), "node node01 cannot be drained") ||
		!regexp.MustCompile(`replica r-\w+ of model sim-2node \(on node0[12], node0[12]\) cannot move: profile \S+: needs 2 nodes in one fabric`).Match(drainOut) {
		t.Errorf("llmgw ctl drain node01: %v\n%s\nwant a refusal naming sim-2node's replica", err, drainOut)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refused drain took %s, want at once", d)
	}

	// The destroy of the whole configuration completes: the model goes
	// first, then the nodes, whose replicas stop with them
	// (drain_on_destroy = false), and their identities are revoked.
	destroyOut, took := tf.Run(0, "destroy", "-input=false", "-no-color", "-auto-approve", "-var", "dev_dir="+dir)
	// README.md quotes this count.
	if want := "Destroy complete! Resources: 8 destroyed."; !strings.Contains(destroyOut, want) {
		t.Errorf("destroy output lacks %q:\n%s", want, testcluster.Tail(destroyOut, 30))
	}
	t.Logf("terraform destroy of the quickstart took %s", took)
	if out, err := ctl("model", "get", "mine"); err == nil || !strings.Contains(string(out), `model "mine" is not in the catalog`) {
		t.Errorf("llmgw ctl model get mine after destroy: %v\n%s\nwant: not in the catalog", err, out)
	}
	for _, node := range []string{"node01", "node02", "node03"} {
		testcluster.WaitFor(t, node+"'s agent refused as revoked", 30*time.Second, func() (bool, string) {
			b, _ := os.ReadFile(filepath.Join(dir, "logs", node+".log"))
			return strings.Contains(string(b), "revoked"), testcluster.Tail(string(b), 3)
		})
	}

	if err := dev.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dev.Done:
	case <-time.After(60 * time.Second):
		t.Fatalf("llmgw dev did not stop on SIGINT:\n%s", testcluster.Tail(dev.Output(), 20))
	}
	if code := dev.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("llmgw dev exited %d after SIGINT:\n%s", code, testcluster.Tail(dev.Output(), 20))
	}
}

// checkImportedNodesUnchanged fails the test unless the plan imports the
// three dev nodes with a configuration equal to the one read from them.
func checkImportedNodesUnchanged(t *testing.T, planJSON string) {
	t.Helper()
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Type    string `json:"type"`
			Change  struct {
				Actions   []string             `json:"actions"`
				Before    map[string]any       `json:"before"`
				After     map[string]any       `json:"after"`
				Importing *struct{ ID string } `json:"importing"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(planJSON), &plan); err != nil {
		t.Fatalf("decoding terraform show -json: %v", err)
	}
	imported := 0
	for _, rc := range plan.ResourceChanges {
		if rc.Type != "llmgw_node" {
			continue
		}
		if rc.Change.Importing == nil {
			t.Errorf("%s is not imported (actions %v)", rc.Address, rc.Change.Actions)
			continue
		}
		imported++
		for _, key := range []string{"name", "address", "fabric", "labels", "engines", "model_dirs", "discovery"} {
			before, _ := json.Marshal(rc.Change.Before[key])
			after, _ := json.Marshal(rc.Change.After[key])
			if string(before) != string(after) {
				t.Errorf("%s: the quickstart changes %s from the agent's %s to %s", rc.Address, key, before, after)
			}
		}
	}
	if imported != 3 {
		t.Errorf("the plan imports %d nodes, want node01, node02 and node03", imported)
	}
}

// readDevEnv reads llmgw dev's env file and checks it has what the test uses.
func readDevEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	env := testcluster.ReadDevEnv(t, path)
	for _, k := range []string{"LLMGW_ENDPOINT", "LLMGW_TOKEN", "LLMGW_CA_CERT", "OPENAI_BASE_URL", "OPENAI_API_KEY"} {
		if env[k] == "" {
			t.Fatalf("%s lacks %s", path, k)
		}
	}
	return env
}
