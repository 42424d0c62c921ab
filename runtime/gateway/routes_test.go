package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/spec"
)

// projectAuth takes keys of the form "key-<project>".
type projectAuth struct{}

func (projectAuth) Authenticate(_ context.Context, bearer string) (request.Principal, error) {
	if p, ok := strings.CutPrefix(bearer, "key-"); ok && p != "" {
		return request.Principal{KeyID: bearer, Project: p}, nil
	}
	return request.Principal{}, request.ErrUnauthenticated
}

type call struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t *testing.T, method, url string, header map[string]string, body string) call {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw := readAll(t, resp)
	c := call{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal([]byte(raw), &c.body)
	return c
}

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

const (
	messagesBody  = `{"model":"coder","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	responsesBody = `{"model":"coder","max_output_tokens":5,"input":"hi"}`
)

// TestNewRoutesBindLimitsAndBudgets: /v1/messages and /v1/responses go
// through the same admission as chat: a project's request limit gives 429
// with Retry-After, a spent budget 402, each in the route's error shape,
// and what ran is settled and recorded with its tokens.
func TestNewRoutesBindLimitsAndBudgets(t *testing.T) {
	for _, route := range []struct{ path, body string }{{"/v1/messages", messagesBody}, {"/v1/responses", responsesBody}} {
		t.Run(strings.TrimPrefix(route.path, "/v1/")+" limit", func(t *testing.T) {
			st := contentStore(t, 0)
			if err := st.UpdateProject(t.Context(), store.Project{Name: "proj", RPM: 2}); err != nil {
				t.Fatal(err)
			}
			adm := tenancy.NewAdmission(tenancy.Options{Store: st})
			s := newSimGateway(t, Deps{Admission: adm})
			for i := range 2 {
				if c := do(t, http.MethodPost, s.url+route.path, bearer(testKey), route.body); c.status != 200 {
					t.Fatalf("request %d: %d %s", i, c.status, c.raw)
				}
				rec := <-s.records
				if rec.Endpoint != route.path || rec.PromptTokens == 0 || rec.CompletionTokens == 0 || !rec.UsageReported {
					t.Fatalf("record %+v", rec)
				}
			}
			c := do(t, http.MethodPost, s.url+route.path, bearer(testKey), route.body)
			if c.status != 429 || c.header.Get("Retry-After") == "" {
				t.Fatalf("third request: %d %v %s", c.status, c.header, c.raw)
			}
			checkShape(t, route.path, c, "rate_limit_error", "rate_limit_exceeded")
			if rec := <-s.records; rec.Admission != "limit" || rec.Status != 429 {
				t.Fatalf("record %+v", rec)
			}
		})
		t.Run(strings.TrimPrefix(route.path, "/v1/")+" budget", func(t *testing.T) {
			st := contentStore(t, 0)
			// Completions are priced (1 per 1k tokens), prompts free: each
			// request reserves its max_tokens of 5 and uses up to that; a
			// budget of 0.05 is spent after about ten.
			if err := st.PutBudget(t.Context(), store.Budget{Project: "proj", Period: store.PeriodDay, Amount: 0.05, OnExhausted: store.OnExhaustedRefuse}); err != nil {
				t.Fatal(err)
			}
			adm := tenancy.NewAdmission(tenancy.Options{Store: st, DefaultPrice: &spec.Pricing{CompletionPer1K: 1}})
			var spent float64
			s := newSimGateway(t, Deps{Admission: adm})
			var last call
			for i := 0; i < 50; i++ {
				last = do(t, http.MethodPost, s.url+route.path, bearer(testKey), route.body)
				r := <-s.records
				if last.status != 200 {
					break
				}
				spent += adm.Cost(r.Model, int64(r.PromptTokens), int64(r.CompletionTokens))
			}
			if last.status != 402 {
				t.Fatalf("after 50 requests: %d %s", last.status, last.raw)
			}
			t.Logf("refused after spending %.4f of 0.05", spent)
			if spent < 0.03 || spent > 0.05 {
				t.Fatalf("spent %v of a budget of 0.05", spent)
			}
			checkShape(t, route.path, last, "billing_error", "budget_exceeded")
		})
	}
}

// checkShape checks an error body: Anthropic's on /v1/messages, OpenAI's
// elsewhere.
func checkShape(t *testing.T, path string, c call, anthropicType, openaiCode string) {
	t.Helper()
	e, _ := c.body["error"].(map[string]any)
	if e == nil || e["message"] == "" {
		t.Fatalf("error body %s", c.raw)
	}
	if path == "/v1/messages" {
		if c.body["type"] != "error" || e["type"] != anthropicType || c.body["request_id"] == nil {
			t.Fatalf("not Anthropic's error shape with type %s: %s", anthropicType, c.raw)
		}
		return
	}
	if e["code"] != openaiCode {
		t.Fatalf("not OpenAI's error shape with code %s: %s", openaiCode, c.raw)
	}
}

// TestMessagesAuthAndErrors: the key as x-api-key or bearer; a missing
// key, an unknown model and a bad body in Anthropic's shape.
func TestMessagesAuthAndErrors(t *testing.T) {
	s := newSimGateway(t, Deps{})
	url := s.url + "/v1/messages"
	if c := do(t, http.MethodPost, url, map[string]string{"X-Api-Key": testKey, "Anthropic-Version": "2023-06-01"}, messagesBody); c.status != 200 || c.body["type"] != "message" {
		t.Fatalf("x-api-key: %d %s", c.status, c.raw)
	}
	if c := do(t, http.MethodPost, url, bearer(testKey), messagesBody); c.status != 200 {
		t.Fatalf("bearer: %d %s", c.status, c.raw)
	}
	tests := []struct {
		name    string
		header  map[string]string
		body    string
		status  int
		typ     string
		message string
	}{
		{"no key", nil, messagesBody, 401, "authentication_error", "x-api-key"},
		{"wrong key", map[string]string{"X-Api-Key": "nope"}, messagesBody, 401, "authentication_error", "invalid API key"},
		{"unknown model", bearer(testKey), strings.Replace(messagesBody, "coder", "nope", 1), 404, "not_found_error", `"nope" does not exist`},
		{"no max_tokens", bearer(testKey), `{"model":"coder","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "max_tokens: field required"},
		{"max_tokens above the model's", bearer(testKey), strings.Replace(messagesBody, `"max_tokens":5`, `"max_tokens":5000`, 1), 400, "invalid_request_error", "at most 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := do(t, http.MethodPost, url, tt.header, tt.body)
			e, _ := c.body["error"].(map[string]any)
			if c.status != tt.status || c.body["type"] != "error" || e["type"] != tt.typ || !strings.Contains(fmt.Sprint(e["message"]), tt.message) {
				t.Fatalf("got %d %s; want %d %s with %q", c.status, c.raw, tt.status, tt.typ, tt.message)
			}
		})
	}
	if c := do(t, http.MethodGet, url, bearer(testKey), ""); c.status != 405 || c.body["type"] != "error" {
		t.Fatalf("GET: %d %s", c.status, c.raw)
	}
	// A path under /v1/messages/ the gateway does not serve answers in
	// Anthropic's shape too.
	c := do(t, http.MethodPost, url+"/count_tokens", bearer(testKey), messagesBody)
	checkShape(t, "/v1/messages", c, "not_found_error", "")
	if c.status != 404 || !strings.Contains(c.raw, "/v1/messages/count_tokens") {
		t.Fatalf("count_tokens: %d %s", c.status, c.raw)
	}
}

// TestStoredResponsesPolicy: a project that did not opt in keeps nothing
// (store false, previous_response_id not found); one that did keeps its
// responses apart from other projects, and not past the retention.
func TestStoredResponsesPolicy(t *testing.T) {
	st := contentStore(t, 0)
	for _, p := range []string{"keeps", "other"} {
		if err := st.CreateProject(t.Context(), store.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetRetention(t.Context(), p, store.ContentThreads, 1); err != nil {
			t.Fatal(err)
		}
	}
	s := newSimGateway(t, Deps{Auth: projectAuth{}, Content: st})
	url := s.url + "/v1/responses"
	// Every request carries a marker no record may hold.
	const marker = "zq7-kept-content"
	responsesBody := `{"model":"coder","max_output_tokens":5,"input":"` + marker + `"}`
	posts := 0
	send := func(t *testing.T, method, url string, header map[string]string, body string) call {
		if method == http.MethodPost {
			posts++
		}
		return do(t, method, url, header, body)
	}

	off := send(t, http.MethodPost, url, bearer("key-proj"), responsesBody)
	if off.status != 200 || off.body["store"] != false {
		t.Fatalf("project without retention: %d %s", off.status, off.raw)
	}
	id, _ := off.body["id"].(string)
	next := send(t, http.MethodPost, url, bearer("key-proj"), `{"model":"coder","input":"`+marker+`","previous_response_id":"`+id+`"}`)
	if next.status != 400 || next.body["error"].(map[string]any)["code"] != "previous_response_not_found" {
		t.Fatalf("previous_response_id of an unstored response: %d %s", next.status, next.raw)
	}

	kept := send(t, http.MethodPost, url, bearer("key-keeps"), responsesBody)
	if kept.status != 200 || kept.body["store"] != true {
		t.Fatalf("project with retention: %d %s", kept.status, kept.raw)
	}
	id, _ = kept.body["id"].(string)
	notStored := send(t, http.MethodPost, url, bearer("key-keeps"), `{"model":"coder","input":"`+marker+`","store":false}`)
	if notStored.body["store"] != false {
		t.Fatalf("store:false was stored: %s", notStored.raw)
	}
	if _, err := st.GetResponse(t.Context(), "keeps", notStored.body["id"].(string), time.Now()); err == nil {
		t.Fatal("store:false response is in the store")
	}
	// Another project: GET, DELETE and previous_response_id answer as for
	// an id that does not exist.
	for _, c := range []call{
		send(t, http.MethodGet, url+"/"+id, bearer("key-other"), ""),
		send(t, http.MethodDelete, url+"/"+id, bearer("key-other"), ""),
		send(t, http.MethodGet, url+"/resp_none", bearer("key-keeps"), ""),
	} {
		if c.status != 404 || c.body["error"].(map[string]any)["code"] != "not_found" {
			t.Fatalf("another project's response: %d %s", c.status, c.raw)
		}
	}
	if c := send(t, http.MethodPost, url, bearer("key-other"), `{"model":"coder","input":"`+marker+`","previous_response_id":"`+id+`"}`); c.status != 400 {
		t.Fatalf("another project's previous_response_id: %d %s", c.status, c.raw)
	}
	got := send(t, http.MethodGet, url+"/"+id, bearer("key-keeps"), "")
	if got.status != 200 || got.body["id"] != id {
		t.Fatalf("own response: %d %s", got.status, got.raw)
	}
	// DELETE answers as OpenAI's does; the response is gone.
	other := send(t, http.MethodPost, url, bearer("key-keeps"), responsesBody)
	if c := send(t, http.MethodDelete, url+"/"+other.body["id"].(string), bearer("key-keeps"), ""); c.status != 200 ||
		c.body["object"] != "response.deleted" || c.body["deleted"] != true || c.body["id"] != other.body["id"] {
		t.Fatalf("DELETE: %d %s", c.status, c.raw)
	}
	if c := send(t, http.MethodGet, url+"/"+other.body["id"].(string), bearer("key-keeps"), ""); c.status != 404 {
		t.Fatalf("GET after DELETE: %d %s", c.status, c.raw)
	}
	// Retention: an hour later the response is gone, for reads and for
	// the prune.
	sr, err := st.GetResponse(t.Context(), "keeps", id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d := sr.ExpiresAt.Sub(sr.CreatedAt); d != time.Hour {
		t.Fatalf("kept for %s, want the project's 1h", d)
	}
	if _, err := st.GetResponse(t.Context(), "keeps", id, sr.ExpiresAt); err == nil {
		t.Fatal("read after its retention")
	}
	if n, err := st.PruneContent(t.Context(), sr.ExpiresAt); err != nil || n != 1 {
		t.Fatalf("prune at expiry deleted %d, %v", n, err)
	}
	if c := send(t, http.MethodGet, url+"/"+id, bearer("key-keeps"), ""); c.status != 404 {
		t.Fatalf("after the prune: %d %s", c.status, c.raw)
	}
	// No usage record carries message content: every request's record.
	for i := range posts {
		select {
		case rec := <-s.records:
			if strings.Contains(fmt.Sprintf("%+v", rec), marker) {
				t.Fatalf("usage record %d carries message content: %+v", i, rec)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d usage records observed", i, posts)
		}
	}
}

// TestTranslatedStreamCutAtBound: an engine that streams past the
// max_tokens admission reserved is cut there on a translated route and on
// a thread too: no more tokens than reserved (reasoning counted), the
// token past the bound in neither what is relayed nor the final text nor
// the stored thread, and the answer ends as cut at the bound (a thread's
// with a final chunk and [DONE]).
func TestTranslatedStreamCutAtBound(t *testing.T) {
	tests := []struct {
		name, path, body string
		thread           bool
		reasoning        int
		check            func(t *testing.T, body string)
	}{
		{name: "messages", path: "/v1/messages",
			body: `{"model":"coder","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			check: func(t *testing.T, body string) {
				if n := strings.Count(body, `"text_delta"`); n != 3 || !strings.Contains(body, `"stop_reason":"max_tokens"`) || !strings.Contains(body, "message_stop") {
					t.Fatalf("%d deltas relayed of a bound of 3:\n%s", n, body)
				}
			}},
		{name: "responses", path: "/v1/responses",
			body: `{"model":"coder","max_output_tokens":3,"stream":true,"input":"hi"}`,
			check: func(t *testing.T, body string) {
				if n := strings.Count(body, "event: response.output_text.delta"); n != 3 || !strings.Contains(body, `"text":"t0t1t2"`) {
					t.Fatalf("%d deltas relayed of a bound of 3, or a final text other than t0t1t2:\n%s", n, body)
				}
				if !strings.Contains(body, "event: response.incomplete") && !strings.Contains(body, "event: response.completed") {
					t.Fatalf("the response does not end:\n%s", body)
				}
			}},
		{name: "thread", path: "/v1/chat/completions", thread: true, reasoning: 2,
			body: `{"model":"coder","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			check: func(t *testing.T, body string) {
				events := streamEvents(body)
				if len(events) < 2 || events[len(events)-1] != "[DONE]" || !strings.Contains(events[len(events)-2], `"finish_reason":"length"`) {
					t.Fatalf("a thread's stream cut at its bound does not end with a length chunk and [DONE]:\n%s", body)
				}
				if strings.Count(body, `"reasoning_content"`) != 2 || strings.Count(body, `"content":"t`) != 1 {
					t.Fatalf("want 2 reasoning tokens and 1 of text relayed of a bound of 3:\n%s", body)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adm := &recordingAdmission{}
			h := newHarness(t, 1, Config{}, adm)
			st := contentStore(t, 1)
			h.gw.deps.Content = st
			h.engines[0].handle = func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range tt.reasoning {
					fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"r%d\"}}]}\n\n", i)
				}
				for i := range 10 {
					fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
				}
				fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
			}
			hdr := bearer(testKey)
			if tt.thread {
				hdr["X-Llmgw-Thread"] = "cut"
			}
			c := do(t, http.MethodPost, h.srv.URL+tt.path, hdr, tt.body)
			if c.status != 200 {
				t.Fatalf("status %d: %s", c.status, c.raw)
			}
			tt.check(t, c.raw)
			if strings.Contains(c.raw, "t3") {
				t.Fatalf("the token past the bound reached the client:\n%s", c.raw)
			}
			if u := adm.settled(t); u.CompletionTokens != 3 || !u.Estimated {
				t.Fatalf("settled %+v, want the 3 relayed tokens, estimated", u)
			}
			h.record() // the handler has returned, the thread is stored
			if tt.thread {
				// The thread keeps what the client got.
				stored, err := st.GetThread(t.Context(), "proj", "cut", time.Now())
				if err != nil {
					t.Fatal(err)
				}
				var msgs []map[string]any
				if err := json.Unmarshal(stored.Messages, &msgs); err != nil || len(msgs) != 2 || msgs[1]["content"] != "t0" {
					t.Fatalf("stored thread %s, want the turn and the answer t0", stored.Messages)
				}
			}
		})
	}
}
