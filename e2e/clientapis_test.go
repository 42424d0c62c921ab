package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// bearerTransport adds the key and agent id to the MCP client's requests.
type bearerTransport struct{ key, agent string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	r.Header.Set("X-Llmgw-Agent", b.agent)
	return http.DefaultTransport.RoundTrip(r)
}

// TestClientAPIsThroughTheServer: the control plane as a process, with
// key authentication, priced admission and the usage recorder on its
// store: a project opts in with `llmgw keys threads` and `llmgw keys
// memory`; then /v1/responses (openai-go, a second turn through
// previous_response_id), /v1/messages (x-api-key), a thread and the MCP
// memory tools work; the usage rows of these routes count tokens and hold
// no text.
func TestClientAPIsThroughTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	tc := newTenancyCluster(t)
	st := tc.store()
	key := tc.newKey(st, "keeps", store.Project{}, store.APIKey{}, nil)
	cfg := filepath.Join(tc.Dir, "server.yaml")
	for _, kind := range []string{"threads", "memory"} {
		out, err := exec.Command(binary, "keys", kind, "--project", "keeps", "--retain-hours", "24", "-c", cfg).CombinedOutput()
		if err != nil {
			t.Fatalf("llmgw keys %s: %v\n%s", kind, err, out)
		}
	}
	ctx := t.Context()
	const secret = "my-secret-word-is-heliotrope"

	client := openai.NewClient(option.WithBaseURL(tc.Client), option.WithAPIKey(key), option.WithMaxRetries(0))
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "sim-priced",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(secret)}, MaxOutputTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.RawJSON(), `"store":true`) || first.Usage.InputTokens == 0 {
		t.Fatalf("first response %s", first.RawJSON())
	}
	second, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "sim-priced", PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("again?")}, MaxOutputTokens: openai.Int(8)})
	if err != nil {
		t.Fatal(err)
	}
	if second.Usage.InputTokens <= first.Usage.InputTokens {
		t.Fatalf("the second turn did not carry the first: %d prompt tokens after %d", second.Usage.InputTokens, first.Usage.InputTokens)
	}

	post := func(path string, h map[string]string, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tc.Client+path, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	status, _, body := post("/messages", map[string]string{"X-Api-Key": key, "Anthropic-Version": "2023-06-01"},
		`{"model":"sim-priced","max_tokens":8,"messages":[{"role":"user","content":"`+secret+`"}]}`)
	if status != 200 || !strings.Contains(body, `"type":"message"`) {
		t.Fatalf("/v1/messages: %d %s", status, body)
	}
	var prompts []int
	for i, turn := range []string{secret, "and then?"} {
		status, _, body = post("/chat/completions", map[string]string{"Authorization": "Bearer " + key, "X-Llmgw-Thread": "conv-1"},
			fmt.Sprintf(`{"model":"sim-priced","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, turn))
		if status != 200 {
			t.Fatalf("thread turn %d: %d %s", i, status, body)
		}
		var chat struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(body), &chat)
		prompts = append(prompts, chat.Usage.PromptTokens)
	}
	// The second turn's prompt holds the first turn and its 8-token answer.
	if prompts[1] < prompts[0]+8 {
		t.Fatalf("the thread's second turn went without its history: prompts of %v tokens", prompts)
	}

	mc := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: strings.TrimSuffix(tc.Client, "/v1") + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{key, "agent-1"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "remember", Arguments: map[string]any{"text": "the build cache is on node07"}}); err != nil || res.IsError {
		t.Fatalf("remember: %v %+v", err, res)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "recall", Arguments: map[string]any{"query": "cache"}})
	if err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), "node07") {
		t.Fatalf("recall: %v %+v", err, res)
	}

	// The usage rows: one per request of each route, tokens counted, no text.
	var rows []store.UsageRow
	testcluster.WaitFor(t, "the usage rows written", 30*time.Second, func() (bool, string) {
		rows, err = st.ListUsage(context.Background(), store.UsageQuery{Project: "keeps"}, 0, 0)
		if err != nil {
			return false, err.Error()
		}
		return len(rows) >= 5, fmt.Sprintf("%d rows", len(rows))
	})
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.Endpoint]++
		if r.PromptTokens == 0 || r.CompletionTokens == 0 {
			t.Errorf("usage row without tokens: %+v", r)
		}
		if b, _ := json.Marshal(r); strings.Contains(string(b), "heliotrope") {
			t.Errorf("a usage row holds message content: %s", b)
		}
	}
	if seen["/v1/responses"] != 2 || seen["/v1/messages"] != 1 || seen["/v1/chat/completions"] != 2 {
		t.Fatalf("usage rows by endpoint %v, want 2 responses, 1 messages, 2 chat", seen)
	}
	var apiErr *openai.Error
	if _, err := client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); err != nil {
		t.Fatalf("Get: %v", err)
	}
	other := tc.newKey(st, "nokeep", store.Project{}, store.APIKey{}, nil)
	otherClient := openai.NewClient(option.WithBaseURL(tc.Client), option.WithAPIKey(other), option.WithMaxRetries(0))
	if _, err := otherClient.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("another project's Get: %v", err)
	}
}
