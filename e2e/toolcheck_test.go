package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/testkit/gguf"
	"github.com/llmgw/llmgw/testkit/llamacpp"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestToolCheckLlamaCpp runs `llmgw ctl tool-check` against real
// llama-servers built from one GGUF, with and without their chat-template
// options: the model's own template (llama-server's Jinja is on by
// default) gives structured tool_calls; --chat-template chatml, a template
// that renders no tools, leaves the call as plain text, a parser mismatch,
// and the check names --jinja without --chat-template; --no-jinja refuses
// the tools, and the check names --jinja. The random model is pushed to
// open a call with logit_bias passed through --extra.
func TestToolCheckLlamaCpp(t *testing.T) {
	server := llamacpp.Server(t)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguf.Write(model, gguf.Model{}); err != nil {
		t.Fatal(err)
	}
	def := func(name, args string) string {
		return `  - name: ` + name + `
    source: ` + model + `
    context_length: 1024
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: cpu, engine: llamacpp, startup_timeout: 2m` + args + ` }
`
	}
	c := testcluster.New(t, binary, "10s", def("tools-jinja", "")+def("tools-chatml", `, args: ["--chat-template", "chatml"]`)+def("tools-nojinja", `, args: ["--no-jinja"]`))
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Engines: map[string]string{"llamacpp": server}})
	mc := c.ManageClient()
	testcluster.WaitReadyReplicas(t, mc, "", 3, 3*time.Minute)

	// No end-of-turn push here: with tool_choice "auto" llama-server's
	// grammar only starts at <tool_call>, so end-of-turn would win first.
	bias := gguf.ToolCallBias()
	delete(bias, strconv.Itoa(gguf.TokenID("<|im_end|>")))
	extra, _ := json.Marshal(map[string]any{"logit_bias": bias, "max_tokens": 150})
	check := func(model string) (int, *managev1.ToolCheck, string) {
		cmd := exec.Command(binary, "ctl", "tool-check", model, "--extra", string(extra), "--json")
		cmd.Env = append(os.Environ(), "LLMGW_ENDPOINT="+c.Manage, "LLMGW_TOKEN="+c.Token, "LLMGW_CA_CERT="+filepath.Join(c.PKIDir, "ca.pem"))
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		res := &managev1.ToolCheck{}
		if err := protojson.Unmarshal(out, res); err != nil {
			t.Fatalf("tool-check %s printed %q: %v", model, out, err)
		}
		return code, res, string(out)
	}
	tests := []struct {
		model, verdict, fix string
		code                int
	}{
		{"tools-jinja", "structured", "", 0},
		{"tools-chatml", "text", "--jinja without --chat-template", 1},
		{"tools-nojinja", "refused", "--jinja", 1},
	}
	for _, tt := range tests {
		code, res, out := check(tt.model)
		if code != tt.code || res.GetVerdict() != tt.verdict || !strings.HasPrefix(res.GetFix(), tt.fix) || (tt.fix == "" && res.GetFix() != "") {
			t.Errorf("tool-check %s: exit %d, verdict %q, fix %q; want exit %d, %q, fix %q\n%s", tt.model, code, res.GetVerdict(), res.GetFix(), tt.code, tt.verdict, tt.fix, out)
		}
		t.Logf("%s: %s: %s (fix: %s)", tt.model, res.GetVerdict(), res.GetDetail(), res.GetFix())
	}
	if _, res, _ := check("tools-jinja"); len(res.GetToolCalls()) == 0 || !strings.HasPrefix(res.GetToolCalls()[0], "get_weather(") {
		t.Errorf("structured calls %q, want get_weather(...)", res.GetToolCalls())
	}

	// The agent read the real llama-server's --help in its engine check: a
	// model whose profile uses a flag that help does not list is refused
	// when added, naming the flag, the engine and its version, and the node.
	t.Run("unknown flag refused", func(t *testing.T) {
		_, err := mc.CreateModel(t.Context(), &managev1.CreateModelRequest{Model: &managev1.Model{
			Name: "bad-flag", Source: model, Scaling: &managev1.Scaling{Min: 1, Max: 1},
			Profiles: []*specv1.Profile{{Name: "cpu", Engine: "llamacpp", StartupTimeout: "2m", Args: []string{"--no-such-flag", "--jinja"}}},
		}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("create with --no-such-flag: %v, want InvalidArgument", err)
		}
		for _, want := range []string{"--no-such-flag", "llama-server (version: ", "on node node01", "`llama-server --help` does not list it"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "--jinja") {
			t.Errorf("error %q names --jinja, which llama-server takes", err)
		}
	})
}
