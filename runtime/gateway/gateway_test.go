package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

const testKey = "sk-test"

// testCatalog is a Catalog over fixed models.
type testCatalog []ModelInfo

func (c testCatalog) Lookup(name string) (request.Model, bool) {
	for _, m := range c {
		if m.ID == name || slices.Contains(m.Aliases, name) {
			return request.Model{Name: m.ID, Aliases: m.Aliases, Limits: testLimits[m.ID]}, true
		}
	}
	return request.Model{}, false
}

func (c testCatalog) List() []ModelInfo { return c }

// testLimits are the limits of testModels.
var testLimits = map[string]request.Limits{
	"qwen/coder-3b": {MaxOutput: 1024, ContextLength: 8192},
}

// testAuth accepts testKey only.
type testAuth struct{}

func (testAuth) Authenticate(_ context.Context, bearer string) (request.Principal, error) {
	if bearer == testKey {
		return request.Principal{KeyID: "key-1", Project: "proj"}, nil
	}
	return request.Principal{}, fmt.Errorf("looking up key: %w", request.ErrUnauthenticated)
}

// engine is a fake inference engine speaking OpenAI's shapes.
type engine struct {
	name   string
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	// handle, when set, replaces the default behaviour after the body is
	// recorded.
	handle func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

func (e *engine) lastBody(t *testing.T) map[string]any {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.bodies) == 0 {
		t.Fatalf("engine %s received no request", e.name)
	}
	var m map[string]any
	if err := json.Unmarshal(e.bodies[len(e.bodies)-1], &m); err != nil {
		t.Fatalf("engine %s received invalid JSON: %v", e.name, err)
	}
	return m
}

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.bodies = append(e.bodies, raw)
	e.mu.Unlock()
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	w.Header().Set("X-Engine", e.name)
	if e.handle != nil {
		e.handle(w, r, body)
		return
	}
	if r.URL.Path == "/v1/embeddings" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":%q,"usage":{"prompt_tokens":3,"total_tokens":3}}`, body["model"])
		return
	}
	if body["stream"] == true {
		writeSSE(w, body, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`, body["model"])
}

// writeSSE streams two content chunks, then the usage chunk when asked, then
// [DONE]. between, when set, runs after the first chunk is flushed.
func writeSSE(w http.ResponseWriter, body map[string]any, between func()) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	usage := false
	if so, ok := body["stream_options"].(map[string]any); ok {
		usage = so["include_usage"] == true
	}
	null := ""
	if usage {
		null = `,"usage":null`
	}
	fmt.Fprintf(w, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]%s}\n\n", null)
	_ = rc.Flush()
	if between != nil {
		between()
	}
	fmt.Fprintf(w, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]%s}\n\n", null)
	if usage {
		fmt.Fprint(w, "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

type harness struct {
	t       *testing.T
	gw      *Gateway
	srv     *httptest.Server
	router  *router.Router
	engines []*engine
	records chan request.Record
	ready   bool
	readyMu sync.Mutex
}

var testModels = testCatalog{
	{ID: "qwen/coder-3b", Aliases: []string{"coder"}, Created: 1700000000, OwnedBy: "platform"},
	{ID: "cold"}, // in the catalog, no replica ready
	{ID: "down"}, // its only endpoint refuses connections
}

func newHarness(t *testing.T, engines int, cfg Config, admission Admission) *harness {
	t.Helper()
	h := &harness{t: t, router: router.New(), records: make(chan request.Record, 256), ready: true}
	var eps []router.Endpoint
	for i := 0; i < engines; i++ {
		e := &engine{name: fmt.Sprintf("e%d", i)}
		e.srv = httptest.NewServer(e)
		t.Cleanup(e.srv.Close)
		h.engines = append(h.engines, e)
		eps = append(eps, router.Endpoint{ReplicaID: e.name, URL: e.srv.URL, Weight: 1})
	}
	h.router.SetEndpoints("qwen/coder-3b", eps)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	h.router.SetEndpoints("down", []router.Endpoint{{ReplicaID: "dead", URL: closed}})

	h.gw = New(cfg, Deps{
		Catalog:   testModels,
		Auth:      testAuth{},
		Routes:    h.router,
		Admission: admission,
		Observer:  ObserverFunc(func(r request.Record) { h.records <- r }),
		Ready: func() bool {
			h.readyMu.Lock()
			defer h.readyMu.Unlock()
			return h.ready
		},
	})
	h.srv = httptest.NewServer(h.gw.Handler())
	t.Cleanup(func() { h.srv.Close(); h.gw.Close() })
	return h
}

func (h *harness) post(ctx context.Context, path, body string) *http.Response {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

// record waits for the next observed request.
func (h *harness) record() request.Record {
	h.t.Helper()
	select {
	case r := <-h.records:
		return r
	case <-time.After(10 * time.Second):
		h.t.Fatal("no request was observed within 10s")
		return request.Record{}
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return string(b)
}

func TestAliasRewritesModel(t *testing.T) {
	tests := []struct {
		name  string
		model string
	}{
		{name: "alias", model: "coder"},
		{name: "canonical", model: "qwen/coder-3b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, Config{}, nil)
			body := fmt.Sprintf(`{ "messages":[{"role":"user","content":"say \"model\": coder"}], "model" : %q, "temperature":0.5 }`, tt.model)
			resp := h.post(context.Background(), "/v1/chat/completions", body)
			out := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			got := h.engines[0].lastBody(t)
			if got["model"] != "qwen/coder-3b" {
				t.Errorf("engine saw model %v, want the canonical name", got["model"])
			}
			msgs, _ := got["messages"].([]any)
			if len(msgs) != 1 || msgs[0].(map[string]any)["content"] != `say "model": coder` || got["temperature"] != 0.5 {
				t.Errorf("other fields changed: %v", got)
			}
			if tt.model == "qwen/coder-3b" && string(h.engines[0].bodies[0]) != body {
				t.Errorf("body with the canonical name was not forwarded verbatim:\n%s", h.engines[0].bodies[0])
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("response has no x-request-id")
			}
			rec := h.record()
			if rec.Model != "qwen/coder-3b" || rec.Principal.KeyID != "key-1" || rec.ReplicaID != "e0" ||
				rec.Status != 200 || rec.PromptTokens != 5 || rec.CompletionTokens != 2 || !rec.UsageReported || rec.Stream {
				t.Errorf("record = %+v", rec)
			}
		})
	}
}

func TestLeastLoadedSpreading(t *testing.T) {
	h := newHarness(t, 2, Config{}, nil)
	arrived := make(chan string, 2)
	release := make(chan struct{})
	for _, e := range h.engines {
		e.handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			arrived <- r.Header.Get("X-Request-Id")
			<-release
			w.Header().Set("Content-Type", "application/json")
			if _, err := io.WriteString(w, `{"choices":[]}`); err != nil {
				t.Errorf("engine writing response: %v", err)
			}
		}
	}
	done := make(chan struct{}, 2)
	send := func() {
		resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"coder"}`)
		defer resp.Body.Close()
		readAll(t, resp)
		done <- struct{}{}
	}
	wait := func() {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("request did not reach an engine")
		}
	}
	go send()
	wait() // the first request is in flight on one engine
	go send()
	wait()
	close(release)
	<-done
	<-done
	a, b := h.record().ReplicaID, h.record().ReplicaID
	if a == b || a == "" || b == "" {
		t.Fatalf("two concurrent requests went to %q and %q, want one per engine", a, b)
	}

	// Sequential requests at equal (zero) load alternate.
	for _, e := range h.engines {
		e.handle = nil
	}
	counts := map[string]int{}
	for i := 0; i < 6; i++ {
		resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"coder"}`)
		readAll(t, resp)
		_ = resp.Body.Close()
		counts[h.record().ReplicaID]++
	}
	if counts["e0"] != 3 || counts["e1"] != 3 {
		t.Errorf("sequential requests spread %v, want 3 each", counts)
	}
}

func TestStreamingRelayedIncrementally(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	proceed := make(chan struct{})
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeSSE(w, body, func() { <-proceed })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := h.post(ctx, "/v1/chat/completions", `{"model":"coder","stream":true}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q, want text/event-stream", ct)
	}
	br := bufio.NewReader(resp.Body)
	// The engine is blocked until proceed is closed, so this read only
	// succeeds if the gateway relayed the first chunk on its own.
	first, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the first chunk before the engine sent the second: %v", err)
	}
	if !strings.Contains(first, `"Hel"`) {
		t.Fatalf("first line %q, want the first content chunk", first)
	}
	close(proceed)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rest), `"lo"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("rest of stream = %q", rest)
	}
}

func TestStreamUsage(t *testing.T) {
	tests := []struct {
		name          string
		body          string
		wantUsageSent bool // the client sees the usage chunk
	}{
		{name: "client did not ask: injected and stripped", body: `{"model":"coder","stream":true}`},
		{name: "client said false: injected and stripped", body: `{"model":"coder","stream":true,"stream_options":{"include_usage":false}}`},
		{name: "client asked: relayed", body: `{"model":"coder","stream":true,"stream_options":{"include_usage":true}}`, wantUsageSent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adm := &recordingAdmission{}
			h := newHarness(t, 1, Config{}, adm)
			resp := h.post(context.Background(), "/v1/completions", tt.body)
			out := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			so, _ := h.engines[0].lastBody(t)["stream_options"].(map[string]any)
			if so["include_usage"] != true {
				t.Errorf("engine was not asked for usage: stream_options=%v", so)
			}
			if got := strings.Contains(out, `"usage":{`); got != tt.wantUsageSent {
				t.Errorf("client saw the usage chunk: %v, want %v; stream:\n%s", got, tt.wantUsageSent, out)
			}
			if !strings.Contains(out, `"Hel"`) || !strings.HasSuffix(out, "data: [DONE]\n\n") {
				t.Errorf("stream lost content: %q", out)
			}
			rec := h.record()
			if !rec.Stream || rec.PromptTokens != 5 || rec.CompletionTokens != 2 || !rec.UsageReported || rec.TTFT <= 0 || rec.TTFT > rec.Latency {
				t.Errorf("record = %+v", rec)
			}
			if u := adm.settled(t); u.TotalTokens != 7 || !u.Reported {
				t.Errorf("ticket settled with %+v, want 7 total tokens", u)
			}
		})
	}
}

func TestNonStreamUsage(t *testing.T) {
	tests := []struct {
		path               string
		prompt, completion int
	}{
		{path: "/v1/chat/completions", prompt: 5, completion: 2},
		{path: "/v1/completions", prompt: 5, completion: 2},
		{path: "/v1/embeddings", prompt: 3},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			adm := &recordingAdmission{}
			h := newHarness(t, 1, Config{}, adm)
			resp := h.post(context.Background(), tt.path, `{"model":"coder","input":"x","max_tokens":16}`)
			if out := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(out, `"usage"`) {
				t.Fatalf("status %d body %s", resp.StatusCode, out)
			}
			rec := h.record()
			if rec.PromptTokens != tt.prompt || rec.CompletionTokens != tt.completion || rec.Endpoint != tt.path {
				t.Errorf("record = %+v", rec)
			}
			if u := adm.settled(t); u.PromptTokens != tt.prompt {
				t.Errorf("settled %+v", u)
			}
			if adm.info.MaxTokens != 16 || adm.info.Endpoint != tt.path || adm.model != "qwen/coder-3b" {
				t.Errorf("admission saw %+v for %q", adm.info, adm.model)
			}
		})
	}
}

// recordingAdmission admits everything and remembers the settlement.
type recordingAdmission struct {
	mu     sync.Mutex
	model  string
	info   request.Info
	usage  chan request.Usage
	reject *request.Rejection
	// fallback, when set, is served instead of the model asked for.
	fallback string
	// header is added to admitted responses.
	header http.Header
}

func (a *recordingAdmission) Admit(_ context.Context, _ request.Principal, model string, info request.Info) (request.Ticket, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reject != nil {
		return nil, a.reject
	}
	a.model, a.info = model, info
	if a.usage == nil {
		a.usage = make(chan request.Usage, 4)
	}
	return a, nil
}

func (a *recordingAdmission) Settle(u request.Usage) request.Usage { a.usage <- u; return u }

// MaxTokens forwards the client's max_tokens, else 77: a bound the test
// can tell from any the client sent.
func (a *recordingAdmission) MaxTokens() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.info.Endpoint == "/v1/embeddings":
		return 0
	case a.info.MaxTokens > 0:
		return a.info.MaxTokens
	}
	return 77
}

func (a *recordingAdmission) Model() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fallback != "" {
		return a.fallback
	}
	return a.model
}

func (a *recordingAdmission) SetHeaders(h http.Header) {
	for k, v := range a.header {
		h[k] = v
	}
}

func (a *recordingAdmission) settled(t *testing.T) request.Usage {
	t.Helper()
	a.mu.Lock()
	ch := a.usage
	a.mu.Unlock()
	select {
	case u := <-ch:
		select {
		case u2 := <-ch:
			t.Fatalf("ticket settled twice: %+v then %+v", u, u2)
		default:
		}
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("ticket was not settled within 10s")
		return request.Usage{}
	}
}

// onlyModel admits everything but lets the principal see one model.
type onlyModel struct {
	AdmitAll
	model string
}

func (o onlyModel) Allows(_ context.Context, _ request.Principal, model string) bool {
	return model == o.model
}

func TestModelsFilteredByAdmission(t *testing.T) {
	h := newHarness(t, 1, Config{}, onlyModel{model: "cold"})
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, readAll(t, resp)
	}
	_, body := get("/v1/models")
	if !strings.Contains(body, `"id":"cold"`) || strings.Contains(body, "qwen/coder-3b") {
		t.Errorf("/v1/models shows models the project may not use: %s", body)
	}
	if status, _ := get("/v1/models/coder"); status != http.StatusNotFound {
		t.Errorf("GET a hidden model by alias = %d, want 404", status)
	}
}

func TestAdmissionFallbackAndHeaders(t *testing.T) {
	adm := &recordingAdmission{fallback: "qwen/coder-3b", header: http.Header{"X-Ratelimit-Remaining-Requests": {"41"}}}
	h := newHarness(t, 1, Config{}, adm)
	resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"cold","messages":[]}`)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Ratelimit-Remaining-Requests"); got != "41" {
		t.Errorf("x-ratelimit-remaining-requests = %q, want the ticket's 41", got)
	}
	if got := h.engines[0].lastBody(t)["model"]; got != "qwen/coder-3b" {
		t.Errorf("engine saw model %v, want the fallback", got)
	}
	rec := h.record()
	if rec.Model != "qwen/coder-3b" || rec.Requested != "cold" {
		t.Errorf("record model %q requested %q; want the fallback and the model asked for", rec.Model, rec.Requested)
	}
	if u := adm.settled(t); u.CompletionTokens != 2 || !u.Reported {
		t.Errorf("settled %+v", u)
	}

	// A refusal's headers reach the client and its reason the record.
	adm.reject = &request.Rejection{Status: 429, Type: "rate_limit_error", Code: "rate_limit_exceeded", Message: "slow down",
		Reason: "limit", Header: http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}}}
	resp = h.post(t.Context(), "/v1/chat/completions", `{"model":"coder"}`)
	readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Errorf("refusal: status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if rec := h.record(); rec.Admission != "limit" || rec.Status != 429 {
		t.Errorf("refusal record = %+v", rec)
	}
}

func TestClientCancelPropagates(t *testing.T) {
	adm := &recordingAdmission{}
	h := newHarness(t, 1, Config{}, adm)
	canceled := make(chan struct{})
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		if _, err := io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"); err != nil {
			t.Errorf("engine writing first chunk: %v", err)
		}
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(canceled)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := h.post(ctx, "/v1/chat/completions", `{"model":"coder","stream":true}`)
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("reading first chunk: %v", err)
	}
	cancel()
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the engine's request was not canceled within 10s of the client leaving")
	}
	rec := h.record()
	// The engine never reported usage: the relayed event is charged, with
	// the prompt estimate, so the reservation settles on something real.
	u := adm.settled(t)
	if u.Reported || !u.Estimated || u.CompletionTokens != 1 || u.PromptTokens != request.TypicalPromptTokens(len(`{"model":"coder","stream":true}`), false) {
		t.Errorf("settled usage of an abandoned stream = %+v", u)
	}
	if !rec.UsageEstimated || rec.CompletionTokens != 1 || rec.Status != statusClientGone {
		t.Errorf("record of an abandoned stream = %+v", rec)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if load := h.router.Snapshot()["qwen/coder-3b"][0].InFlight; load == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease not released after the client left")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestErrorResponses(t *testing.T) {
	hijackClose := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}
	tests := []struct {
		name       string
		method     string
		path       string
		auth       string
		body       string
		engine     func(http.ResponseWriter, *http.Request, map[string]any)
		reject     *request.Rejection
		wantStatus int
		wantType   string
		wantCode   string
		wantParam  string
		wantRetry  string
	}{
		{name: "no key", auth: "-", body: `{"model":"coder"}`, wantStatus: 401, wantType: typeAuthentication, wantCode: "invalid_api_key"},
		{name: "not bearer", auth: "Basic " + testKey, body: `{"model":"coder"}`, wantStatus: 401, wantType: typeAuthentication, wantCode: "invalid_api_key"},
		{name: "bad key", auth: "Bearer sk-wrong", body: `{"model":"coder"}`, wantStatus: 401, wantType: typeAuthentication, wantCode: "invalid_api_key"},
		{name: "malformed json", body: `{"model":`, wantStatus: 400, wantType: typeInvalidRequest, wantCode: "invalid_json"},
		{name: "missing model", body: `{"prompt":"x"}`, wantStatus: 400, wantType: typeInvalidRequest, wantCode: "missing_model", wantParam: "model"},
		{name: "unknown model", body: `{"model":"gpt-9"}`, wantStatus: 404, wantType: typeInvalidRequest, wantCode: "model_not_found", wantParam: "model"},
		{name: "too large", body: `{"model":"coder","prompt":"` + strings.Repeat("x", 2048) + `"}`, wantStatus: 413, wantType: typeInvalidRequest, wantCode: "request_too_large"},
		{name: "no replica ready", body: `{"model":"cold"}`, wantStatus: 503, wantType: typeUnavailable, wantCode: "model_not_ready", wantRetry: "7"},
		{name: "upstream refuses", body: `{"model":"down"}`, wantStatus: 502, wantType: typeUpstream, wantCode: "upstream_error"},
		{name: "upstream closes before answering", body: `{"model":"coder"}`, engine: hijackClose, wantStatus: 502, wantType: typeUpstream, wantCode: "upstream_error"},
		{name: "admission rejects", body: `{"model":"coder"}`, reject: &request.Rejection{Status: 429, Type: "rate_limit_exceeded", Code: "rate_limit_exceeded", Message: "slow down", RetryAfter: 1500 * time.Millisecond},
			wantStatus: 429, wantType: "rate_limit_exceeded", wantCode: "rate_limit_exceeded", wantRetry: "2"},
		{name: "wrong method", method: http.MethodGet, wantStatus: 405, wantType: typeInvalidRequest, wantCode: "method_not_allowed"},
		{name: "unknown path", path: "/v1/nothing", wantStatus: 404, wantType: typeInvalidRequest, wantCode: "unknown_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adm := &recordingAdmission{reject: tt.reject}
			h := newHarness(t, 1, Config{MaxBodyBytes: 1024, RetryAfter: 7 * time.Second}, adm)
			h.engines[0].handle = tt.engine
			method, path, auth := tt.method, tt.path, tt.auth
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/chat/completions"
			}
			if auth == "" {
				auth = "Bearer " + testKey
			}
			req, _ := http.NewRequest(method, h.srv.URL+path, strings.NewReader(tt.body))
			if auth != "-" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw := readAll(t, resp)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, raw)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no x-request-id")
			}
			if got := resp.Header.Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After %q, want %q", got, tt.wantRetry)
			}
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(raw), &body); err != nil {
				t.Fatalf("error body is not JSON: %v: %s", err, raw)
			}
			e := body.Error
			if e.Message == "" || e.Type != tt.wantType || e.Code == nil || *e.Code != tt.wantCode {
				t.Errorf("error = %s, want type %s code %s", raw, tt.wantType, tt.wantCode)
			}
			if (tt.wantParam == "") != (e.Param == nil) || (e.Param != nil && *e.Param != tt.wantParam) {
				t.Errorf("param = %v, want %q", e.Param, tt.wantParam)
			}
			if strings.Contains(raw, testKey) || strings.Contains(raw, "sk-wrong") {
				t.Errorf("error body leaks the key: %s", raw)
			}
			if tt.path != "" {
				return // not an inference endpoint: nothing is observed
			}
			if rec := h.record(); rec.Status != tt.wantStatus {
				t.Errorf("observed status %d, want %d", rec.Status, tt.wantStatus)
			}
		})
	}
}

func TestUpstreamErrorRelayed(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		if _, err := io.WriteString(w, `{"error":{"message":"context too long","type":"invalid_request_error","param":null,"code":null}}`); err != nil {
			t.Errorf("engine writing error body: %v", err)
		}
	}
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"coder","stream":true}`)
	out := readAll(t, resp)
	if resp.StatusCode != 400 || !strings.Contains(out, "context too long") {
		t.Errorf("status %d body %s, want the engine's 400", resp.StatusCode, out)
	}
	if rec := h.record(); rec.Status != 400 || rec.UsageReported {
		t.Errorf("record = %+v", rec)
	}
}

func TestModelsHealthReady(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	get := func(path string, auth bool) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+path, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer "+testKey)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}

	status, body := get("/v1/models", true)
	var list struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || status != 200 {
		t.Fatalf("GET /v1/models: %d %s", status, body)
	}
	if list.Object != "list" || len(list.Data) != len(testModels) {
		t.Fatalf("model list = %+v", list)
	}
	m := list.Data[0]
	if m.ID != "qwen/coder-3b" || m.Object != "model" || m.Created != 1700000000 || m.OwnedBy != "platform" ||
		len(m.Aliases) != 1 || m.Aliases[0] != "coder" {
		t.Errorf("first model = %+v", m)
	}
	if list.Data[1].OwnedBy != "llmgw" {
		t.Errorf("default owner = %q", list.Data[1].OwnedBy)
	}

	tests := []struct {
		path   string
		auth   bool
		status int
		want   string
	}{
		{path: "/v1/models", auth: false, status: 401, want: "invalid_api_key"},
		{path: "/v1/models/coder", auth: true, status: 200, want: `"id":"qwen/coder-3b"`},
		{path: "/v1/models/qwen/coder-3b", auth: true, status: 200, want: `"id":"qwen/coder-3b"`},
		{path: "/v1/models/nope", auth: true, status: 404, want: "model_not_found"},
		{path: "/health", status: 200, want: "ok"},
		{path: "/ready", status: 200, want: "ready"},
	}
	for _, tt := range tests {
		if status, body := get(tt.path, tt.auth); status != tt.status || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s = %d %s, want %d containing %s", tt.path, status, body, tt.status, tt.want)
		}
	}

	h.readyMu.Lock()
	h.ready = false
	h.readyMu.Unlock()
	if status, _ := get("/ready", false); status != 503 {
		t.Errorf("/ready when not serving = %d, want 503", status)
	}
	if status, _ := get("/health", false); status != 200 {
		t.Errorf("/health when not serving = %d, want 200", status)
	}
}

func TestRequestIDPassedThrough(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	seen := make(chan string, 1)
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		seen <- r.Header.Get("X-Request-Id")
		if r.Header.Get("Authorization") != "" {
			t.Error("the client's key was forwarded to the engine")
		}
		w.Header().Set("Content-Type", "application/json")
		if _, err := io.WriteString(w, `{}`); err != nil {
			t.Errorf("engine writing response: %v", err)
		}
	}
	tests := []struct{ sent, want string }{
		{sent: "abc-123", want: "abc-123"},
		{sent: "bad id\twith spaces", want: ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"coder"}`))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("X-Request-Id", tt.sent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		got := resp.Header.Get("X-Request-Id")
		if tt.want != "" && got != tt.want || tt.want == "" && (got == "" || got == tt.sent) {
			t.Errorf("sent %q, got x-request-id %q", tt.sent, got)
		}
		if s := <-seen; s != got {
			t.Errorf("engine saw request id %q, client got %q", s, got)
		}
	}
}

func BenchmarkProxyNonStreaming(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if _, err := io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`); err != nil {
			b.Errorf("upstream writing response: %v", err)
		}
	}))
	defer up.Close()
	rt := router.New()
	rt.SetEndpoints("qwen/coder-3b", []router.Endpoint{{ReplicaID: "r", URL: up.URL}})
	gw := New(Config{}, Deps{Catalog: testModels, Auth: testAuth{}, Routes: rt})
	defer gw.Close()
	srv := httptest.NewServer(gw.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	body := `{"model":"coder","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testKey)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

// TestForwardedBound: the engine receives the completion bound admission
// reserved for, in every bound key the client used, or in max_tokens when
// it used none; embeddings get none.
func TestForwardedBound(t *testing.T) {
	adm := &recordingAdmission{}
	h := newHarness(t, 1, Config{}, adm)
	tests := []struct {
		path, body string
		want       map[string]any // keys the engine must see; nil value: absent
	}{
		{"/v1/chat/completions", `{"model":"coder","messages":[]}`, map[string]any{"max_tokens": 77.0}},
		{"/v1/chat/completions", `{"model":"coder","max_tokens":null,"messages":[]}`, map[string]any{"max_tokens": 77.0}},
		{"/v1/chat/completions", `{"model":"coder","max_tokens":5}`, map[string]any{"max_tokens": 5.0}},
		{"/v1/chat/completions", `{"model":"coder","max_tokens":900,"max_completion_tokens":5}`,
			map[string]any{"max_tokens": 5.0, "max_completion_tokens": 5.0}},
		{"/v1/completions", `{"model":"coder","prompt":"x","n_predict":9}`, map[string]any{"n_predict": 9.0, "max_tokens": 9.0}},
		{"/v1/embeddings", `{"model":"coder","input":"x"}`, map[string]any{"max_tokens": nil}},
	}
	for _, tt := range tests {
		resp := h.post(t.Context(), tt.path, tt.body)
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tt.body, resp.StatusCode, body)
		}
		adm.settled(t)
		h.record()
		got := h.engines[0].lastBody(t)
		for k, v := range tt.want {
			if gv, ok := got[k]; v == nil && ok || v != nil && gv != v {
				t.Errorf("%s %s: engine saw %s = %v, want %v", tt.path, tt.body, k, gv, v)
			}
		}
	}
}

// TestMaxTokensAboveModelLimit: a bound above what the model can produce
// is refused as OpenAI refuses it, before admission.
func TestMaxTokensAboveModelLimit(t *testing.T) {
	adm := &recordingAdmission{}
	h := newHarness(t, 1, Config{}, adm)
	for _, key := range []string{"max_tokens", "max_completion_tokens"} {
		resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"coder","`+key+`":1000000,"messages":[]}`)
		body := readAll(t, resp)
		want := `{"error":{"message":"` + key + ` is too large: 1000000. This model supports at most 1024 completion tokens, whereas you provided 1000000.","type":"invalid_request_error","param":"` + key + `","code":"invalid_value"}}` + "\n"
		if resp.StatusCode != http.StatusBadRequest || body != want {
			t.Errorf("status %d body\n%s\nwant 400\n%s", resp.StatusCode, body, want)
		}
		if rec := h.record(); rec.Status != http.StatusBadRequest {
			t.Errorf("record status %d", rec.Status)
		}
	}
	adm.mu.Lock()
	defer adm.mu.Unlock()
	if adm.model != "" {
		t.Errorf("admission saw the refused request")
	}
}

// Regression: a client that read a stream to its [DONE] and hung up before
// the engine closed the stream was recorded as gone (499) and its answer
// charged as abandoned. Seen with `llmgw dev` stopping under a stream.
func TestStreamReadToDoneIsComplete(t *testing.T) {
	h := newHarness(t, 0, Config{}, nil)
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
			`[DONE]`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", ev)
		}
		w.(http.Flusher).Flush()
		// The stream stays open until the client has gone (the gateway
		// then cancels this request).
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(eng.Close)
	h.router.SetEndpoints("qwen/coder-3b", []router.Endpoint{{ReplicaID: "slow-close", URL: eng.URL, Weight: 1}})

	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"coder","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before [DONE]: %v", err)
		}
		if strings.Contains(line, "[DONE]") {
			break
		}
	}
	resp.Body.Close() // hang up before the engine ends its stream
	rec := h.record()
	if rec.Status != http.StatusOK || rec.CompletionTokens != 1 || !rec.UsageReported {
		t.Errorf("record = status %d, %d completion tokens, reported %v; want 200, 1, true: the client read the whole answer",
			rec.Status, rec.CompletionTokens, rec.UsageReported)
	}
}

// TestRateHeadersOnEveryAnswer: the ticket's x-ratelimit-* headers, written
// while the engine works, are on a streamed answer, a whole one, and an
// error the gateway gives after admission (a replica that refuses
// connections, a model with no replica).
func TestRateHeadersOnEveryAnswer(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"whole", `{"model":"coder","messages":[]}`},
		{"stream", `{"model":"coder","messages":[],"stream":true}`},
		{"replica refuses", `{"model":"down","messages":[]}`},
		{"no replica", `{"model":"cold","messages":[]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			adm := &recordingAdmission{header: http.Header{"X-Ratelimit-Remaining-Requests": {"41"}}}
			h := newHarness(t, 1, Config{}, adm)
			resp := h.post(t.Context(), "/v1/chat/completions", c.body)
			body := readAll(t, resp)
			if got := resp.Header.Get("X-Ratelimit-Remaining-Requests"); got != "41" {
				t.Errorf("status %d (%s): x-ratelimit-remaining-requests = %q, want the ticket's 41", resp.StatusCode, body, got)
			}
		})
	}
}

// TestWholeAnswerSentBeforeSettling: a whole answer reaches the client
// before the request is settled and recorded; here the record waits until
// the client has read the answer (it would time out otherwise).
func TestWholeAnswerSentBeforeSettling(t *testing.T) {
	e := &engine{name: "e0"}
	e.srv = httptest.NewServer(e)
	defer e.srv.Close()
	rt := router.New()
	rt.SetEndpoints("qwen/coder-3b", []router.Endpoint{{ReplicaID: "e0", URL: e.srv.URL, Weight: 1}})
	read := make(chan struct{})
	recorded := make(chan bool, 1)
	g := New(Config{}, Deps{Catalog: testModels, Auth: testAuth{}, Routes: rt, Admission: &recordingAdmission{},
		Observer: ObserverFunc(func(request.Record) {
			select {
			case <-read:
				recorded <- true
			case <-time.After(5 * time.Second):
				recorded <- false
			}
		})})
	srv := httptest.NewServer(g.Handler())
	defer func() { srv.Close(); g.Close() }()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"coder","messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	close(read)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Hello") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if !<-recorded {
		t.Error("the request was recorded before its answer reached the client")
	}
}
