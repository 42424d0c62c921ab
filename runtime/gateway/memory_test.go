package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/testkit/nodejs"
)

// headerTransport adds headers to every request (the MCP client's key and
// agent id).
type headerTransport struct{ h map[string]string }

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func memoryGateway(t *testing.T) (string, store.Store) {
	t.Helper()
	return memoryGatewayWith(t, Config{}, nil)
}

// memoryGatewayWith is memoryGateway with a config and an admission.
func memoryGatewayWith(t *testing.T, cfg Config, adm func(store.Store) Admission) (string, store.Store) {
	t.Helper()
	st := contentStore(t, 0)
	for p, hours := range map[string]int{"keeps": 720, "other": 720, "off": 0} {
		if err := st.CreateProject(t.Context(), store.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetRetention(t.Context(), p, store.ContentMemory, hours); err != nil {
			t.Fatal(err)
		}
	}
	deps := Deps{Catalog: testModels, Auth: projectAuth{}, Routes: nil, Content: st}
	if adm != nil {
		deps.Admission = adm(st)
	}
	gw := New(cfg, deps)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	return srv.URL, st
}

func mcpSession(t *testing.T, url, key, agent string) *mcp.ClientSession {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + key}
	if agent != "" {
		h["X-Llmgw-Agent"] = agent
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "llmgw-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{h}}}, nil)
	if err != nil {
		t.Fatalf("connecting to /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callTool calls a tool and returns its structured result, or the text of
// its error.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (map[string]any, string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		return nil, strings.Join(text, " ")
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out, ""
}

// TestMCPMemory: the official MCP Go SDK client lists and calls remember,
// recall and forget at /mcp with a project's key; notes are private to
// project and agent, and a project without memory is told so.
func TestMCPMemory(t *testing.T) {
	url, _ := memoryGateway(t)
	cs := mcpSession(t, url, "key-keeps", "planner")
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "remember,recall,forget" && strings.Join(names, ",") != "forget,recall,remember" {
		t.Fatalf("tools %v", names)
	}
	saved, errText := callTool(t, cs, "remember", map[string]any{"text": "The staging database is pg-stage-2"})
	if errText != "" || saved["id"] == "" {
		t.Fatalf("remember: %v %s", saved, errText)
	}
	id := saved["id"].(string)
	if _, e := callTool(t, cs, "remember", map[string]any{"text": "deploys happen on Tuesdays"}); e != "" {
		t.Fatal(e)
	}
	got, _ := callTool(t, cs, "recall", map[string]any{"query": "STAGING database"})
	if notes := got["notes"].([]any); len(notes) != 1 || notes[0].(map[string]any)["id"] != id {
		t.Fatalf("recall: %v", got)
	}
	if got, _ := callTool(t, cs, "recall", map[string]any{}); len(got["notes"].([]any)) != 2 {
		t.Fatalf("recall all: %v", got)
	}
	// Another agent of the project, and another project, see nothing and
	// cannot forget the note.
	for _, other := range []*mcp.ClientSession{mcpSession(t, url, "key-keeps", "coder"), mcpSession(t, url, "key-other", "planner")} {
		if got, _ := callTool(t, other, "recall", map[string]any{}); len(got["notes"].([]any)) != 0 {
			t.Fatalf("another agent or project recalled %v", got)
		}
		if _, e := callTool(t, other, "forget", map[string]any{"id": id}); !strings.Contains(e, "not found") {
			t.Fatalf("another agent or project forgot a note: %q", e)
		}
	}
	if _, e := callTool(t, cs, "forget", map[string]any{"id": id}); e != "" {
		t.Fatal(e)
	}
	if got, _ := callTool(t, cs, "recall", map[string]any{"query": "staging"}); len(got["notes"].([]any)) != 0 {
		t.Fatalf("recalled a forgotten note: %v", got)
	}
	off := mcpSession(t, url, "key-off", "")
	if _, e := callTool(t, off, "remember", map[string]any{"text": "x"}); !strings.Contains(e, "does not keep memory notes") {
		t.Fatalf("remember in a project without memory: %q", e)
	}
	// Behind a reverse proxy on the same host: a loopback connection with
	// the public Host is served (the key is what guards /mcp).
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "llmgw.example.com"
	req.Header.Set("Authorization", "Bearer key-keeps")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	proxied, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, proxied); proxied.StatusCode != 200 || !strings.Contains(body, `"remember"`) {
		t.Fatalf("/mcp with Host llmgw.example.com on a loopback connection: %d %s", proxied.StatusCode, body)
	}
	// A bad agent id is refused before any tool, with HTTP 400.
	if c := do(t, http.MethodPost, url+"/mcp", map[string]string{"Authorization": "Bearer key-keeps", "X-Llmgw-Agent": "not an id!",
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); c.status != 400 || !strings.Contains(c.raw, "invalid_agent") {
		t.Fatalf("/mcp with a bad agent id: %d %s", c.status, c.raw)
	}
	// Without a key the transport refuses before any tool.
	resp, err := http.Post(url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/mcp without a key: %d", resp.StatusCode)
	}
}

// TestMemoryAPI: /v1/memory saves, searches and deletes notes, private to
// project and agent, refused for a project without memory, and kept for
// the project's retention from the last write.
func TestMemoryAPI(t *testing.T) {
	url, st := memoryGateway(t)
	h := func(key, agent string) map[string]string {
		m := bearer(key)
		if agent != "" {
			m["X-Llmgw-Agent"] = agent
		}
		return m
	}
	c := do(t, http.MethodPost, url+"/v1/memory", h("key-keeps", "bot"), `{"text":"the VPN needs a token"}`)
	if c.status != 200 || c.body["object"] != "memory.note" || c.body["agent"] != "bot" {
		t.Fatalf("save: %d %s", c.status, c.raw)
	}
	id := c.body["id"].(string)
	if exp, upd := c.body["expires_at"].(float64), c.body["updated_at"].(float64); exp-upd != 720*3600 {
		t.Fatalf("kept for %vs, want the project's 720h", exp-upd)
	}
	c = do(t, http.MethodPost, url+"/v1/memory", h("key-keeps", "bot"), `{"id":"`+id+`","text":"the VPN needs a hardware token"}`)
	if c.status != 200 || c.body["id"] != id {
		t.Fatalf("replace: %d %s", c.status, c.raw)
	}
	c = do(t, http.MethodGet, url+"/v1/memory?q=hardware+vpn", h("key-keeps", "bot"), "")
	if data := c.body["data"].([]any); c.status != 200 || len(data) != 1 || data[0].(map[string]any)["text"] != "the VPN needs a hardware token" {
		t.Fatalf("search: %d %s", c.status, c.raw)
	}
	for _, other := range []map[string]string{h("key-keeps", ""), h("key-other", "bot")} {
		if c := do(t, http.MethodGet, url+"/v1/memory", other, ""); len(c.body["data"].([]any)) != 0 {
			t.Fatalf("another agent or project found %s", c.raw)
		}
		if c := do(t, http.MethodDelete, url+"/v1/memory/"+id, other, ""); c.status != 404 {
			t.Fatalf("another agent or project deleted: %d %s", c.status, c.raw)
		}
	}
	tests := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"memory off", http.MethodPost, "/v1/memory", "key-off", `{"text":"x"}`, 400, "memory_off"},
		{"empty text", http.MethodPost, "/v1/memory", "key-keeps", `{"text":" "}`, 400, "invalid_value"},
		{"bad limit", http.MethodGet, "/v1/memory?limit=0", "key-keeps", "", 400, "invalid_value"},
		{"no key", http.MethodGet, "/v1/memory", "", "", 401, "invalid_api_key"},
		{"put", http.MethodPut, "/v1/memory", "key-keeps", "", 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hd := map[string]string{}
			if tt.key != "" {
				hd = bearer(tt.key)
			}
			c := do(t, tt.method, url+tt.path, hd, tt.body)
			if c.status != tt.status || c.body["error"].(map[string]any)["code"] != tt.code {
				t.Fatalf("got %d %s", c.status, c.raw)
			}
		})
	}
	if c := do(t, http.MethodDelete, url+"/v1/memory/"+id, h("key-keeps", "bot"), ""); c.status != 200 || c.body["deleted"] != true {
		t.Fatalf("delete: %d %s", c.status, c.raw)
	}
	// Retention: a note is not found after it expired.
	c = do(t, http.MethodPost, url+"/v1/memory", h("key-keeps", "bot"), `{"text":"short lived"}`)
	exp := time.Unix(int64(c.body["expires_at"].(float64)), 0)
	if notes, err := st.SearchNotes(t.Context(), "keeps", "bot", "", exp, 10); err != nil || len(notes) != 0 {
		t.Fatalf("notes after their expiry: %v %v", notes, err)
	}
}

// TestMCPTypeScriptSDK runs the official MCP TypeScript SDK, unmodified,
// against /mcp: the tools listed, remember, recall, forget, and forgetting
// again told apart as an error.
func TestMCPTypeScriptSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node.js")
	}
	dir := nodejs.Install(t, nodejs.MCP)
	url, _ := memoryGateway(t)
	out := nodejs.Run(t, filepath.Join("testdata", "mcp-memory.cjs"),
		"SDK_DIR="+dir, "MCP_URL="+url+"/mcp", "API_KEY=key-keeps", "AGENT=planner")
	t.Logf("%s", out)
	var got struct {
		Tools []string
		Saved struct{ ID, Text string }
		Found struct {
			Notes []struct{ ID, Text string }
		}
		Forgot struct{ Deleted string }
		Again  struct {
			IsError bool `json:"isError"`
			Text    string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	if strings.Join(got.Tools, ",") != "forget,recall,remember" || got.Saved.ID == "" ||
		len(got.Found.Notes) != 1 || got.Found.Notes[0].ID != got.Saved.ID || got.Forgot.Deleted != got.Saved.ID ||
		!got.Again.IsError || !strings.Contains(got.Again.Text, "not found") {
		t.Fatalf("MCP TypeScript client saw %s", out)
	}
}

// TestMemoryBounds: an agent keeps at most MaxNotesPerAgent notes (a
// replacement by id always fits; another agent has its own), refused
// with a clear error on /v1/memory and /mcp alike; and both count
// against the project's requests per minute.
func TestMemoryBounds(t *testing.T) {
	t.Run("notes per agent", func(t *testing.T) {
		url, _ := memoryGatewayWith(t, Config{MaxNotesPerAgent: 3}, nil)
		h := bearer("key-keeps")
		h["X-Llmgw-Agent"] = "bot"
		var first string
		for i := range 3 {
			c := do(t, http.MethodPost, url+"/v1/memory", h, `{"text":"note `+strconv.Itoa(i)+`"}`)
			if c.status != 200 {
				t.Fatalf("note %d: %d %s", i, c.status, c.raw)
			}
			if i == 0 {
				first = c.body["id"].(string)
			}
		}
		c := do(t, http.MethodPost, url+"/v1/memory", h, `{"text":"one too many"}`)
		if e, _ := c.body["error"].(map[string]any); c.status != 400 || e["code"] != "too_many_notes" ||
			!strings.Contains(e["message"].(string), "holds 3 notes") || !strings.Contains(e["message"].(string), "limits.max_notes_per_agent") {
			t.Fatalf("a fourth note: %d %s", c.status, c.raw)
		}
		if c := do(t, http.MethodPost, url+"/v1/memory", h, `{"text":"replaced","id":"`+first+`"}`); c.status != 200 {
			t.Fatalf("replacing a note at the bound: %d %s", c.status, c.raw)
		}
		if _, e := callTool(t, mcpSession(t, url, "key-keeps", "bot"), "remember", map[string]any{"text": "by MCP"}); !strings.Contains(e, "holds 3 notes") {
			t.Fatalf("remember at the bound: %q", e)
		}
		if _, e := callTool(t, mcpSession(t, url, "key-keeps", "other-bot"), "remember", map[string]any{"text": "mine"}); e != "" {
			t.Fatalf("another agent at its first note: %q", e)
		}
	})
	t.Run("notes at once", func(t *testing.T) {
		// 12 notes saved at once, /v1/memory and /mcp mixed, under a
		// bound of 3: exactly 3 are kept, the rest refused.
		url, st := memoryGatewayWith(t, Config{MaxNotesPerAgent: 3}, nil)
		var wg sync.WaitGroup
		var mu sync.Mutex
		saved, refused := 0, 0
		for i := range 12 {
			wg.Go(func() {
				ok, msg := false, ""
				if i%2 == 0 {
					h := bearer("key-keeps")
					h["X-Llmgw-Agent"] = "bot"
					c := do(t, http.MethodPost, url+"/v1/memory", h, `{"text":"note `+strconv.Itoa(i)+`"}`)
					ok = c.status == 200
					if e, _ := c.body["error"].(map[string]any); e != nil {
						msg, _ = e["message"].(string)
					}
				} else {
					_, msg = callTool(t, mcpSession(t, url, "key-keeps", "bot"), "remember", map[string]any{"text": "by MCP " + strconv.Itoa(i)})
					ok = msg == ""
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case ok:
					saved++
				case strings.Contains(msg, "limits.max_notes_per_agent"):
					refused++
				default:
					t.Errorf("note %d: %q", i, msg)
				}
			})
		}
		wg.Wait()
		held, err := st.SearchNotes(t.Context(), "keeps", "bot", "", time.Now(), 100)
		if err != nil {
			t.Fatal(err)
		}
		if saved != 3 || refused != 9 || len(held) != 3 {
			t.Fatalf("12 notes at once under a bound of 3: %d saved, %d refused, %d kept", saved, refused, len(held))
		}
	})
	t.Run("notes per project", func(t *testing.T) {
		// Agent ids are the client's to choose: the project's notes are
		// bounded over all of them.
		url, _ := memoryGatewayWith(t, Config{MaxNotesPerProject: 4}, nil)
		for i := range 4 {
			h := bearer("key-keeps")
			h["X-Llmgw-Agent"] = "agent-" + strconv.Itoa(i)
			if c := do(t, http.MethodPost, url+"/v1/memory", h, `{"text":"one"}`); c.status != 200 {
				t.Fatalf("agent %d: %d %s", i, c.status, c.raw)
			}
		}
		h := bearer("key-keeps")
		h["X-Llmgw-Agent"] = "agent-new"
		c := do(t, http.MethodPost, url+"/v1/memory", h, `{"text":"one more"}`)
		if e, _ := c.body["error"].(map[string]any); c.status != 400 || e["code"] != "too_many_notes" || !strings.Contains(e["message"].(string), "limits.max_notes_per_project") {
			t.Fatalf("a fifth note in the project: %d %s", c.status, c.raw)
		}
		if c := do(t, http.MethodPost, url+"/v1/memory", bearer("key-other"), `{"text":"another project"}`); c.status != 200 {
			t.Fatalf("another project: %d %s", c.status, c.raw)
		}
	})
	t.Run("requests per minute", func(t *testing.T) {
		url, _ := memoryGatewayWith(t, Config{}, func(st store.Store) Admission {
			if err := st.UpdateProject(t.Context(), store.Project{Name: "keeps", RPM: 2}); err != nil {
				t.Fatal(err)
			}
			return tenancy.NewAdmission(tenancy.Options{Store: st})
		})
		for i := range 2 {
			if c := do(t, http.MethodGet, url+"/v1/memory", bearer("key-keeps"), ""); c.status != 200 || c.header.Get("X-Ratelimit-Limit-Requests") != "2" {
				t.Fatalf("request %d: %d %v %s", i, c.status, c.header, c.raw)
			}
		}
		c := do(t, http.MethodPost, url+"/v1/memory", bearer("key-keeps"), `{"text":"x"}`)
		if e, _ := c.body["error"].(map[string]any); c.status != 429 || c.header.Get("Retry-After") == "" || e["code"] != "rate_limit_exceeded" {
			t.Fatalf("third request: %d %v %s", c.status, c.header, c.raw)
		}
		c = do(t, http.MethodPost, url+"/mcp", map[string]string{"Authorization": "Bearer key-keeps", "Content-Type": "application/json",
			"Accept": "application/json, text/event-stream"}, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		if c.status != 429 || c.header.Get("Retry-After") == "" {
			t.Fatalf("/mcp past the project's requests per minute: %d %v %s", c.status, c.header, c.raw)
		}
		// Another project has its own count.
		if c := do(t, http.MethodGet, url+"/v1/memory", bearer("key-other"), ""); c.status != 200 {
			t.Fatalf("another project: %d %s", c.status, c.raw)
		}
	})
}
