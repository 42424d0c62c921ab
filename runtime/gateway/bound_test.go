package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

// overshootingSSE streams n tokens whatever max_tokens says, in the shape
// of chat (object chat.completion.chunk) or completions (text_completion),
// then a finish chunk, the usage chunk when asked, and [DONE].
func overshootingSSE(n int, completions bool) func(w http.ResponseWriter, r *http.Request, body map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		object := "chat.completion.chunk"
		piece := func(s string) string { return fmt.Sprintf(`"delta":{"content":%q}`, s) }
		if completions {
			object = "text_completion"
			piece = func(s string) string { return fmt.Sprintf(`"text":%q`, s) }
		}
		head := fmt.Sprintf(`"id":"x1","object":%q,"created":1700000000,"model":%q`, object, body["model"])
		if !completions {
			fmt.Fprintf(w, "data: {%s,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n", head)
		}
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "data: {%s,\"choices\":[{\"index\":0,%s,\"finish_reason\":null}]}\n\n", head, piece(fmt.Sprintf(" w%d", i)))
		}
		fmt.Fprintf(w, "data: {%s,\"choices\":[{\"index\":0,%s,\"finish_reason\":\"length\"}]}\n\n", head, piece(""))
		if so, ok := body["stream_options"].(map[string]any); ok && so["include_usage"] == true {
			fmt.Fprintf(w, "data: {%s,\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", head, n, n+5)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

// streamEvents returns the data of each event of an SSE body.
func streamEvents(body string) []string {
	var out []string
	for _, ev := range strings.Split(body, "\n\n") {
		if d, ok := strings.CutPrefix(strings.TrimSpace(ev), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// TestStreamCutAtReservedTokens: an engine that streams past the
// max_tokens it was sent is cut at the bound the ticket reserved: the
// client gets exactly that many tokens, a finish_reason of "length", its
// usage chunk if it asked, and [DONE]; the request is settled on what was
// relayed. An engine that keeps to the bound is relayed untouched.
func TestStreamCutAtReservedTokens(t *testing.T) {
	tests := []struct {
		name, path, body string
		engineTokens     int
		completions      bool
		wantTokens       int
		cut, usage       bool
	}{
		{name: "chat overshoots", path: "/v1/chat/completions", engineTokens: 10, wantTokens: 3, cut: true,
			body: `{"model":"coder","max_tokens":3,"stream":true,"messages":[]}`},
		{name: "chat overshoots, usage asked", path: "/v1/chat/completions", engineTokens: 10, wantTokens: 3, cut: true, usage: true,
			body: `{"model":"coder","max_tokens":3,"stream":true,"stream_options":{"include_usage":true},"messages":[]}`},
		{name: "completions overshoot", path: "/v1/completions", engineTokens: 9, completions: true, wantTokens: 4, cut: true,
			body: `{"model":"coder","max_tokens":4,"stream":true,"prompt":"x"}`},
		{name: "chat keeps to the bound", path: "/v1/chat/completions", engineTokens: 3, wantTokens: 3,
			body: `{"model":"coder","max_tokens":3,"stream":true,"messages":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adm := &recordingAdmission{}
			h := newHarness(t, 1, Config{}, adm)
			h.engines[0].handle = overshootingSSE(tt.engineTokens, tt.completions)
			resp := h.post(t.Context(), tt.path, tt.body)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			events := streamEvents(body)
			if len(events) == 0 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]:\n%s", body)
			}
			tokens, finishes := 0, 0
			var usage *usageJSON
			for _, ev := range events[:len(events)-1] {
				var c streamChunk
				var u struct {
					Usage *usageJSON `json:"usage"`
				}
				if err := json.Unmarshal([]byte(ev), &c); err != nil {
					t.Fatalf("event %s: %v", ev, err)
				}
				_ = json.Unmarshal([]byte(ev), &u)
				if u.Usage != nil {
					usage = u.Usage
				}
				if c.ID != "x1" || c.Model != "qwen/coder-3b" {
					t.Errorf("event %s lost the stream's id or model", ev)
				}
				for _, ch := range c.Choices {
					if ch.carries() {
						tokens++
					}
					if ch.FinishReason != nil {
						finishes++
						if *ch.FinishReason != "length" {
							t.Errorf("finish_reason %q, want length", *ch.FinishReason)
						}
					}
				}
			}
			if tokens != tt.wantTokens || finishes != 1 {
				t.Errorf("client got %d tokens and %d finish chunks; want %d and 1:\n%s", tokens, finishes, tt.wantTokens, body)
			}
			if tt.usage && (usage == nil || usage.CompletionTokens != tt.wantTokens) {
				t.Errorf("usage chunk = %+v; want %d completion tokens", usage, tt.wantTokens)
			}
			u := adm.settled(t)
			if u.CompletionTokens != tt.wantTokens || u.Estimated != tt.cut {
				t.Errorf("settled %+v; want %d completion tokens, estimated %v", u, tt.wantTokens, tt.cut)
			}
			if rec := h.record(); rec.Status != http.StatusOK || rec.CompletionTokens != tt.wantTokens {
				t.Errorf("record: status %d, %d completion tokens; want 200 and %d", rec.Status, rec.CompletionTokens, tt.wantTokens)
			}
		})
	}
}

// countingAdmission counts admissions and settlements.
type countingAdmission struct {
	mu                sync.Mutex
	admitted, settled int
}

func (a *countingAdmission) Admit(_ context.Context, _ request.Principal, model string, _ request.Info) (request.Ticket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.admitted++
	return &countingTicket{a: a, model: model}, nil
}

func (a *countingAdmission) counts() (int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admitted, a.settled
}

type countingTicket struct {
	a     *countingAdmission
	model string
}

func (t *countingTicket) Model() string          { return t.model }
func (t *countingTicket) MaxTokens() int         { return 8 }
func (t *countingTicket) SetHeaders(http.Header) {}
func (t *countingTicket) Settle(u request.Usage) request.Usage {
	t.a.mu.Lock()
	t.a.settled++
	t.a.mu.Unlock()
	return u
}

// probeBody is accepted by every inference shape: OpenAI chat,
// completions, embeddings and responses, Anthropic messages.
const probeBody = `{"model":"qwen/coder-3b","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"prompt":"hi","input":"hi"}`

// probeBodies are the probes of the routes that translate another API,
// which refuse keys they do not know.
var probeBodies = map[string]string{
	"/v1/messages":  `{"model":"qwen/coder-3b","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`,
	"/v1/responses": `{"model":"qwen/coder-3b","input":"hi","max_output_tokens":4}`,
}

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// TestEveryRouteCounts sends requests to every route of the gateway's
// route table (the only routes it serves) and fails when one reaches an
// engine without being admitted and settled, or is marked as spending and
// does not go through admission. New routes are covered as they are
// added to the table; a path registered any other way is caught by the
// last check, which requires every known API path outside the table to be
// unknown to the gateway.
func TestEveryRouteCounts(t *testing.T) {
	adm := &countingAdmission{}
	h := newHarness(t, 1, Config{}, adm)
	var mu sync.Mutex
	reached := 0
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		mu.Lock()
		reached++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","model":"qwen/coder-3b","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}
	engineCount := func() int { mu.Lock(); defer mu.Unlock(); return reached }

	routes := h.gw.routeTable()
	served := map[string]bool{}
	spending := 0
	for _, rt := range routes {
		method, path, hasMethod := strings.Cut(rt.pattern, " ")
		if !hasMethod {
			method, path = "", rt.pattern
		}
		path = wildcard.ReplaceAllString(path, "x")
		if strings.HasSuffix(path, "/") && path != "/" {
			path += "qwen/coder-3b"
		}
		served[strings.TrimSuffix(rt.pattern, "/")] = true
		methods := []string{http.MethodPost, http.MethodGet}
		if method != "" {
			methods = []string{method}
		}
		for _, m := range methods {
			admitted0, settled0 := adm.counts()
			engine0 := engineCount()
			body := probeBody
			if b, ok := probeBodies[path]; ok {
				body = b
			}
			req, err := http.NewRequestWithContext(t.Context(), m, h.srv.URL+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", m, path, err)
			}
			body = readAll(t, resp)
			reachedEngine := engineCount() > engine0
			if reachedEngine || rt.spends && m == http.MethodPost {
				// Settlement runs as the handler returns, which may be
				// after the client has read the answer.
				deadline := time.Now().Add(5 * time.Second)
				for {
					admitted, settled := adm.counts()
					if admitted > admitted0 && settled > settled0 || time.Now().After(deadline) {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			admitted, settled := adm.counts()
			switch {
			case reachedEngine && !rt.spends:
				t.Errorf("%s %s reached an engine but is not a spending route: register it with spending()", m, path)
			case reachedEngine && (admitted == admitted0 || settled == settled0):
				t.Errorf("%s %s reached an engine: admitted %d times, settled %d times; want both", m, path, admitted-admitted0, settled-settled0)
			case rt.spends && m == http.MethodPost && !reachedEngine:
				t.Errorf("%s %s is a spending route but the probe did not reach an engine (status %d: %s); make the probe fit it",
					m, path, resp.StatusCode, body)
			}
			if rt.spends && m == http.MethodPost {
				spending++
			}
		}
	}
	if spending < 3 {
		t.Errorf("%d spending routes probed; chat, completions and embeddings at least", spending)
	}
	// Known API paths the table does not hold must be unknown: nothing is
	// served around the table.
	for _, p := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages",
		"/v1/audio/transcriptions", "/v1/audio/speech", "/v1/images/generations", "/v1/moderations", "/v1/rerank",
		"/v1/score", "/v1/threads/x", "/v1/memory", "/mcp", "/tokenize", "/v1/batches", "/v1/files"} {
		if served[p] || served[p[:strings.LastIndex(p, "/")]] && strings.Count(p, "/") > 2 {
			continue // the route or the subtree it is in
		}
		engine0 := engineCount()
		resp := h.post(t.Context(), p, probeBody)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"code":"unknown_url"`) || engineCount() != engine0 {
			t.Errorf("POST %s is served (status %d) but is not in the route table: %s", p, resp.StatusCode, body)
		}
	}
}

// TestProxyRefusesWithoutTicket: a handler that forgot admission cannot
// reach an engine.
func TestProxyRefusesWithoutTicket(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
	h.gw.proxy(rec, r, &exchange{}, router.Endpoint{ReplicaID: "e0", URL: h.engines[0].srv.URL}, []byte(`{}`))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", rec.Code)
	}
	h.engines[0].mu.Lock()
	defer h.engines[0].mu.Unlock()
	if len(h.engines[0].bodies) != 0 {
		t.Error("the engine received a request that was not admitted")
	}
}
