package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/sim/simengine"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

// twoModels is a catalog of a large and a small model.
type twoModels struct{}

var twoModelLimits = map[string]request.Limits{
	"big":   {MaxOutput: 64, ContextLength: 8192},
	"small": {MaxOutput: 16, ContextLength: 200},
}

func (twoModels) Lookup(name string) (request.Model, bool) {
	l, ok := twoModelLimits[name]
	return request.Model{Name: name, Limits: l}, ok
}
func (twoModels) List() []ModelInfo { return []ModelInfo{{ID: "big"}, {ID: "small"}} }

// seenEngine is a sim engine that remembers the messages of each chat
// request it served.
type seenEngine struct {
	mu   sync.Mutex
	seen [][]map[string]any
}

func (e *seenEngine) last(t *testing.T) []map[string]any {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.seen) == 0 {
		t.Fatal("the engine got no request")
	}
	return e.seen[len(e.seen)-1]
}

// lastSize is the JSON size of the messages of the last request.
func (e *seenEngine) lastSize(t *testing.T) int {
	t.Helper()
	b, _ := json.Marshal(e.last(t))
	return len(b)
}

func startSeenEngine(t *testing.T, model string) (*seenEngine, string) {
	t.Helper()
	eng, err := simengine.New(simengine.Config{ServedModelName: model, EOSAfter: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	se := &seenEngine{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var v struct {
			Messages []map[string]any `json:"messages"`
		}
		_ = json.Unmarshal(body, &v)
		se.mu.Lock()
		se.seen = append(se.seen, v.Messages)
		se.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		eng.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return se, srv.URL
}

func contents(msgs []map[string]any) string {
	var out []string
	for _, m := range msgs {
		c, _ := m["content"].(string)
		out = append(out, m["role"].(string)+":"+c)
	}
	return strings.Join(out, " | ")
}

// TestThreads: a thread continues across models with its history put
// before the new turn, trimmed (oldest turns first, never the system
// message nor the new turn) to fit a smaller model, after a budget's
// fallback too; it is private to its project, off until the project
// opts in, and deleted by the client.
func TestThreads(t *testing.T) {
	st := contentStore(t, 24)
	for _, p := range []string{"other", "off"} {
		if err := st.CreateProject(t.Context(), store.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetRetention(t.Context(), "other", store.ContentThreads, 1); err != nil {
		t.Fatal(err)
	}
	big, bigURL := startSeenEngine(t, "big")
	small, smallURL := startSeenEngine(t, "small")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: bigURL, Weight: 1}})
	rt.SetEndpoints("small", []router.Endpoint{{ReplicaID: "small-0", URL: smallURL, Weight: 1}})
	adm := &fallbackAdmission{}
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st, Admission: adm})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	url := srv.URL + "/v1/chat/completions"
	turn := func(key, thread, model, content string, stream bool) call {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": model, "stream": stream, "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		h := bearer(key)
		h["X-Llmgw-Thread"] = thread
		return do(t, http.MethodPost, url, h, string(body))
	}

	// The first turn, with a system message, on the big model.
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"
	c := do(t, http.MethodPost, url, h, `{"model":"big","max_tokens":8,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"my name is Ada"}]}`)
	if c.status != 200 {
		t.Fatalf("first turn: %d %s", c.status, c.raw)
	}
	first := c.body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	// The second on the small one: it gets the first turn and its answer.
	if c := turn("key-proj", "t1", "small", "what is my name?", false); c.status != 200 || c.header.Get("X-Llmgw-Thread-Trimmed") != "" {
		t.Fatalf("second turn: %d %v %s", c.status, c.header, c.raw)
	}
	want := "system:be brief | user:my name is Ada | assistant:" + first + " | user:what is my name?"
	if got := contents(small.last(t)); got != want {
		t.Fatalf("small model got %q\nwant %q", got, want)
	}
	// A streamed turn: relayed as the engine sent it, its answer kept.
	s := turn("key-proj", "t1", "big", "stream it", true)
	if s.status != 200 || !strings.Contains(s.raw, "data: [DONE]") || strings.Contains(s.raw, `"choices":[]`) {
		t.Fatalf("streamed turn: %d %s", s.status, s.raw)
	}
	// Grow the thread past what the small model holds (200 tokens).
	for i := range 6 {
		if c := turn("key-proj", "t1", "big", "turn number "+strconv.Itoa(i)+" with some words to take room", false); c.status != 200 {
			t.Fatalf("turn %d: %d %s", i, c.status, c.raw)
		}
	}
	all := len(big.last(t))
	c = turn("key-proj", "t1", "small", "and now?", false)
	n, _ := strconv.Atoi(c.header.Get("X-Llmgw-Thread-Trimmed"))
	got := small.last(t)
	if c.status != 200 || n == 0 || len(got) >= all {
		t.Fatalf("trimmed %q (%d messages sent, %d on big before): %d %s", c.header.Get("X-Llmgw-Thread-Trimmed"), len(got), all, c.status, c.raw)
	}
	if contents(got[:1]) != "system:be brief" || contents(got[len(got)-1:]) != "user:and now?" || got[1]["role"] != "user" {
		t.Fatalf("trimmed thread %q: want the system message first, a whole turn next, the new turn last", contents(got))
	}
	size := 0
	for _, m := range got {
		b, _ := json.Marshal(m)
		size += (len(b) + 3) / 4
	}
	if size > 200-8 {
		t.Fatalf("trimmed thread is about %d tokens, more than the small model's 200 less max_tokens 8", size)
	}
	t.Logf("the last turn on big sent %d messages, the next on small %d (%s turns trimmed)", all, len(got), c.header.Get("X-Llmgw-Thread-Trimmed"))
	// Trimming is for what is sent: the thread keeps every turn, and the
	// next turn on big is sent them all.
	stored, err := st.GetThread(t.Context(), "proj", "t1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var kept []map[string]any
	_ = json.Unmarshal(stored.Messages, &kept)
	if len(kept) != all+3 || contents(kept[:2]) != "system:be brief | user:my name is Ada" {
		t.Fatalf("after a turn trimmed for small the thread holds %d messages (%q...), want all %d", len(kept), contents(kept[:2]), all+3)
	}
	if c := turn("key-proj", "t1", "big", "back on big", false); c.status != 200 || c.header.Get("X-Llmgw-Thread-Trimmed") != "" || len(big.last(t)) != all+4 {
		t.Fatalf("back on big: %d, trimmed %q, sent %d messages, want %d", c.status, c.header.Get("X-Llmgw-Thread-Trimmed"), len(big.last(t)), all+4)
	}

	// A spent budget's fallback: asked for big, served by small, which
	// gets the thread trimmed to its size.
	adm.fallback.Store("small")
	c = turn("key-proj", "t1", "big", "after the fallback", false)
	if c.status != 200 || c.header.Get("X-Llmgw-Thread-Trimmed") == "" || contents(small.last(t)[len(small.last(t))-1:]) != "user:after the fallback" {
		t.Fatalf("fallback turn: %d %v %s", c.status, c.header, c.raw)
	}
	adm.fallback.Store("")

	// Another project's thread of the same id is its own.
	if c := turn("key-other", "t1", "big", "who am I?", false); c.status != 200 || contents(big.last(t)) != "user:who am I?" {
		t.Fatalf("another project saw the thread: %q", contents(big.last(t)))
	}
	// A project that did not opt in cannot use threads.
	if c := turn("key-off", "t1", "big", "hi", false); c.status != 400 || c.body["error"].(map[string]any)["code"] != "threads_off" {
		t.Fatalf("thread in a project without retention: %d %s", c.status, c.raw)
	}
	// n > 1: which answer would the thread keep? Refused.
	h = bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"
	if c := do(t, http.MethodPost, url, h, `{"model":"big","n":2,"messages":[{"role":"user","content":"two answers"}]}`); c.status != 400 ||
		c.body["error"].(map[string]any)["param"] != "n" || !strings.Contains(c.raw, "asks for one answer") {
		t.Fatalf("n=2 on a thread: %d %s", c.status, c.raw)
	}
	if c := do(t, http.MethodPost, srv.URL+"/v1/completions", map[string]string{"Authorization": "Bearer key-proj", "X-Llmgw-Thread": "t1"}, `{"model":"big","prompt":"x"}`); c.status != 400 {
		t.Fatalf("thread on /v1/completions: %d %s", c.status, c.raw)
	}
	// Delete: another project's answers 404, the owner's 200, then 404.
	if c := do(t, http.MethodDelete, srv.URL+"/v1/threads/t1", bearer("key-off"), ""); c.status != 404 {
		t.Fatalf("delete by a project without the thread: %d %s", c.status, c.raw)
	}
	if c := do(t, http.MethodDelete, srv.URL+"/v1/threads/t1", bearer("key-proj"), ""); c.status != 200 || c.body["deleted"] != true {
		t.Fatalf("delete: %d %s", c.status, c.raw)
	}
	if c := do(t, http.MethodDelete, srv.URL+"/v1/threads/t1", bearer("key-proj"), ""); c.status != 404 {
		t.Fatalf("delete twice: %d %s", c.status, c.raw)
	}
	if c := turn("key-proj", "t1", "big", "fresh", false); c.status != 200 || contents(big.last(t)) != "user:fresh" {
		t.Fatalf("after delete the thread starts again: %q", contents(big.last(t)))
	}
}

// fallbackAdmission admits everything, serving fallback when it is set;
// it keeps what the last request it admitted said of itself.
type fallbackAdmission struct {
	fallback atomic.Value
	mu       sync.Mutex
	info     request.Info
}

func (a *fallbackAdmission) lastInfo() request.Info {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.info
}

func (a *fallbackAdmission) Admit(_ context.Context, _ request.Principal, model string, in request.Info) (request.Ticket, error) {
	a.mu.Lock()
	a.info = in
	a.mu.Unlock()
	if f, _ := a.fallback.Load().(string); f != "" {
		return PlainTicket(f), nil
	}
	return PlainTicket(model), nil
}

// TestThreadFallbackToLargerModel: a budget's fallback that holds more
// than the model asked for gets no more of the thread than admission
// reserved for: the history fitted to the requested model, not the
// whole thread the fallback would hold.
func TestThreadFallbackToLargerModel(t *testing.T) {
	st := contentStore(t, 24)
	big, bigURL := startSeenEngine(t, "big")
	_, smallURL := startSeenEngine(t, "small")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: bigURL, Weight: 1}})
	rt.SetEndpoints("small", []router.Endpoint{{ReplicaID: "small-0", URL: smallURL, Weight: 1}})
	adm := &fallbackAdmission{}
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st, Admission: adm})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	turn := func(model, content string) call {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		h := bearer("key-proj")
		h["X-Llmgw-Thread"] = "t1"
		c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, string(body))
		if c.status != 200 {
			t.Fatalf("turn %q on %s: %d %s", content, model, c.status, c.raw)
		}
		return c
	}
	// A thread on big, far past what small holds (200 tokens).
	for i := range 12 {
		turn("big", "turn number "+strconv.Itoa(i)+" with some words to take room")
	}
	whole := len(big.last(t))
	// Asked for small, which holds a few turns; served by big.
	adm.fallback.Store("big")
	c := turn("small", "after the fallback")
	info := adm.lastInfo()
	got := big.last(t)
	if c.header.Get("X-Llmgw-Thread-Trimmed") == "" || len(got) >= whole {
		t.Fatalf("the fallback got %d messages, the last untrimmed turn %d (trimmed %q): more than was admitted",
			len(got), whole, c.header.Get("X-Llmgw-Thread-Trimmed"))
	}
	if sent := big.lastSize(t); sent > info.BodyBytes {
		t.Fatalf("admitted a body of %d bytes, sent %d bytes of messages to the fallback", info.BodyBytes, sent)
	}
	size := 0
	for _, m := range got {
		b, _ := json.Marshal(m)
		size += (len(b) + 3) / 4
	}
	if size > 200-8 {
		t.Fatalf("the fallback got about %d tokens of thread, more than the requested model's 200 less max_tokens 8", size)
	}
	if contents(got[len(got)-1:]) != "user:after the fallback" {
		t.Fatalf("fallback turn sent %q", contents(got))
	}
}

// TestThreadEngineErrorRelayed: an engine's refusal of a thread's request
// reaches the client as it would without a thread: its status, body and
// content type (an engine's other headers are its own); the thread is
// left as it was.
func TestThreadEngineErrorRelayed(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	st := contentStore(t, 1)
	h.gw.deps.Content = st
	const refusal = `{"object":"error","message":"This model's maximum context length is 8192 tokens","type":"BadRequestError","param":null,"code":400}`
	h.engines[0].handle = func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Engine-Reason", "context")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, refusal)
	}
	hdr := bearer(testKey)
	hdr["X-Llmgw-Thread"] = "t1"
	c := do(t, http.MethodPost, h.srv.URL+"/v1/chat/completions", hdr, `{"model":"coder","messages":[{"role":"user","content":"hi"}]}`)
	if c.status != 400 || c.raw != refusal || c.header.Get("Content-Type") != "application/json" || c.header.Get("X-Engine-Reason") != "" {
		t.Fatalf("thread request the engine refused: %d %v %s", c.status, c.header, c.raw)
	}
	h.record()
	if _, err := st.GetThread(t.Context(), "proj", "t1", time.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused turn was stored: %v", err)
	}
}

// countingThreads counts the reads of a thread's content.
type countingThreads struct {
	store.Store
	reads atomic.Int64
}

func (c *countingThreads) GetThread(ctx context.Context, project, id string, now time.Time) (store.Thread, error) {
	c.reads.Add(1)
	return c.Store.(ThreadContent).GetThread(ctx, project, id, now)
}

// refusingAdmission refuses every request (a key over its rate limit)
// while refuse is set, and keeps what the last request said of itself.
type refusingAdmission struct {
	fallbackAdmission
	refuse atomic.Bool
}

func (a *refusingAdmission) Admit(ctx context.Context, p request.Principal, model string, in request.Info) (request.Ticket, error) {
	t, _ := a.fallbackAdmission.Admit(ctx, p, model, in)
	if a.refuse.Load() {
		return nil, &request.Rejection{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded",
			Message: "over the key's rate limit", RetryAfter: time.Second}
	}
	return t, nil
}

// unsizedCatalog is one model, m, whose context is not known.
type unsizedCatalog struct{}

func (unsizedCatalog) Lookup(name string) (request.Model, bool) {
	return request.Model{Name: name}, name == "m"
}
func (unsizedCatalog) List() []ModelInfo { return []ModelInfo{{ID: "m"}} }

// TestThreadRefusedBeforeItIsRead: a request on a thread is admitted
// before the thread is read: admission is told the thread's size (the
// store knows it without reading it), so a refused request reads and
// decodes none of it, whatever its size; an admitted one is read once,
// and admission's estimate covers what is sent.
func TestThreadRefusedBeforeItIsRead(t *testing.T) {
	st := &countingThreads{Store: contentStore(t, 24)}
	eng, engURL := startSeenEngine(t, "m")
	rt := router.New()
	rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "m-0", URL: engURL, Weight: 1}})
	adm := &refusingAdmission{}
	// A model whose context is not known: the whole thread is sent.
	gw := New(Config{}, Deps{Catalog: unsizedCatalog{}, Auth: projectAuth{}, Routes: rt, Content: st, Admission: adm})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "big"
	turn := func(content string) call {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 4,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		return do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, string(body))
	}
	for i := range 4 {
		if c := turn(fmt.Sprintf("turn %d <%s>", i, strings.Repeat("words & more ", 2000))); c.status != 200 {
			t.Fatalf("turn %d: %d %s", i, c.status, c.raw)
		}
	}
	stored, err := st.GetThread(t.Context(), "proj", "big", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st.reads.Store(0)

	adm.refuse.Store(true)
	for range 3 {
		if c := turn("x"); c.status != http.StatusTooManyRequests {
			t.Fatalf("refused turn: %d %s", c.status, c.raw)
		}
	}
	if n := st.reads.Load(); n != 0 {
		t.Fatalf("3 refused requests read the thread %d times, want 0", n)
	}
	info := adm.lastInfo()
	if info.BodyBytes < len(stored.Messages) || info.PromptEstimate < len(stored.Messages) {
		t.Fatalf("admission was told a body of %d bytes, a prompt of %d tokens; the thread alone is %d bytes",
			info.BodyBytes, info.PromptEstimate, len(stored.Messages))
	}

	adm.refuse.Store(false)
	if c := turn("and now"); c.status != 200 {
		t.Fatalf("admitted turn: %d %s", c.status, c.raw)
	}
	if n := st.reads.Load(); n != 1 {
		t.Fatalf("an admitted turn read the thread %d times, want 1", n)
	}
	if info := adm.lastInfo(); info.BodyBytes < len(stored.Messages)+len(`{"role":"user","content":"and now"}`) || eng.lastSize(t) > info.BodyBytes {
		t.Fatalf("admission was told a body of %d bytes; the thread and the turn are more, %d bytes of messages were sent",
			info.BodyBytes, eng.lastSize(t))
	}
}

// contentStores are a store of each backend, keeping the project
// "proj"'s threads for hours.
func contentStores(t *testing.T, hours int) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store { return contentStore(t, hours) },
		"postgres": func(t *testing.T) store.Store {
			st, err := store.Open(t.Context(), pgtest.NewDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			if err := st.CreateProject(t.Context(), store.Project{Name: "proj"}); err != nil {
				t.Fatal(err)
			}
			if err := st.SetRetention(t.Context(), "proj", store.ContentThreads, hours); err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
}

// TestThreadRetryStoresItsTurnOnce: a turn sent again after its first
// attempt was stored (the client missed the answer) replaces that
// attempt's answer instead of being stored twice, when the request says
// it is the same one: the Idempotency-Key its turn was stored with
// (openai-go retrying a 502 with the key set on the call). The retry is
// sent the thread without its earlier attempt. A turn repeated with no
// key, an SDK's retry count (X-Stainless-Retry-Count) notwithstanding,
// or with a key of its own, is a new turn, kept.
func TestThreadRetryStoresItsTurnOnce(t *testing.T) {
	for name, open := range contentStores(t, 24) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			eng, engURL := startSeenEngine(t, "big")
			rt := router.New()
			rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: engURL, Weight: 1}})
			gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
			gwSrv := httptest.NewServer(gw.Handler())
			t.Cleanup(func() { gwSrv.Close(); gw.Close() })
			turn := func(content string, headers ...string) {
				t.Helper()
				h := bearer("key-proj")
				h["X-Llmgw-Thread"] = "t1"
				for i := 0; i+1 < len(headers); i += 2 {
					h[headers[i]] = headers[i+1]
				}
				body, _ := json.Marshal(map[string]any{"model": "big", "max_tokens": 8,
					"messages": []map[string]string{{"role": "user", "content": content}}})
				if c := do(t, http.MethodPost, gwSrv.URL+"/v1/chat/completions", h, string(body)); c.status != 200 {
					t.Fatalf("turn %q: %d %s", content, c.status, c.raw)
				}
			}
			// users is the thread's user messages, in order.
			users := func() string {
				t.Helper()
				th, err := st.GetThread(t.Context(), "proj", "t1", time.Now())
				if err != nil {
					t.Fatal(err)
				}
				var msgs []map[string]any
				_ = json.Unmarshal(th.Messages, &msgs)
				var out []string
				for i, m := range msgs {
					if m["role"] == "user" {
						if i+1 == len(msgs) || msgs[i+1]["role"] != "assistant" {
							t.Fatalf("a turn without its answer: %s", contents(msgs))
						}
						out = append(out, m["content"].(string))
					}
				}
				return strings.Join(out, ",")
			}
			sentUsers := func() string {
				var out []string
				for _, m := range eng.last(t) {
					if m["role"] == "user" {
						out = append(out, m["content"].(string))
					}
				}
				return strings.Join(out, ",")
			}

			turn("q1")
			turn("X", "Idempotency-Key", "k1")
			turn("X", "Idempotency-Key", "k1")
			if got := sentUsers(); got != "q1,X" {
				t.Fatalf("a retry was sent %q, want its thread without its earlier attempt (q1,X)", got)
			}
			if got := users(); got != "q1,X" {
				t.Fatalf("after a retry with the same Idempotency-Key the thread holds %q, want q1,X", got)
			}
			turn("X", "Idempotency-Key", "k2")
			if got := users(); got != "q1,X,X" {
				t.Fatalf("the same turn with a key of its own: %q, want it kept (q1,X,X)", got)
			}
			turn("Y")
			turn("Y")
			if got := users(); got != "q1,X,X,Y,Y" {
				t.Fatalf("a turn repeated with no retry signal: %q, want it kept", got)
			}
			turn("Y", "X-Stainless-Retry-Count", "0")
			if got := users(); got != "q1,X,X,Y,Y,Y" {
				t.Fatalf("a first attempt (X-Stainless-Retry-Count 0): %q, want it kept", got)
			}
			turn("Y", "X-Stainless-Retry-Count", "1")
			if got := users(); got != "q1,X,X,Y,Y,Y,Y" {
				t.Fatalf("an SDK's retry count without a key: %q, want a new turn, kept (it may retry a request refused before it was stored)", got)
			}
			turn("Z", "Idempotency-Key", "k3")
			turn("Z", "X-Stainless-Retry-Count", "1")
			if got := users(); got != "q1,X,X,Y,Y,Y,Y,Z,Z" {
				t.Fatalf("a retry without the key its turn was stored with: %q, want it kept (another request)", got)
			}

			// openai-go, the key set on the call: the first answer is
			// lost on its way (a proxy answers 502 once the gateway
			// answered, so the turn is stored); the SDK sends the request
			// again, with the same headers, and the turn is kept once,
			// with the answer the client got.
			var lost atomic.Bool
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				req, _ := http.NewRequestWithContext(r.Context(), r.Method, gwSrv.URL+r.URL.Path, bytes.NewReader(body))
				req.Header = r.Header.Clone()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				defer resp.Body.Close()
				out, _ := io.ReadAll(resp.Body)
				if !lost.Swap(true) {
					http.Error(w, "connection lost", http.StatusBadGateway)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(resp.StatusCode)
				_, _ = w.Write(out)
			}))
			t.Cleanup(proxy.Close)
			client := openai.NewClient(option.WithBaseURL(proxy.URL+"/v1"), option.WithAPIKey("key-proj"))
			res, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model: "big", MaxTokens: openai.Int(8),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("W")},
			}, option.WithHeader("X-Llmgw-Thread", "t1"), option.WithHeader("Idempotency-Key", "w1"))
			if err != nil || !lost.Load() {
				t.Fatalf("openai-go through a lost answer: %v (lost %v)", err, lost.Load())
			}
			if got := users(); got != "q1,X,X,Y,Y,Y,Y,Z,Z,W" {
				t.Fatalf("after openai-go retried a lost answer the thread holds %q, want W once", got)
			}
			th, _ := st.GetThread(t.Context(), "proj", "t1", time.Now())
			var msgs []map[string]any
			_ = json.Unmarshal(th.Messages, &msgs)
			if last := msgs[len(msgs)-1]["content"]; last != res.Choices[0].Message.Content {
				t.Fatalf("the thread keeps the answer %q, the client got %q", last, res.Choices[0].Message.Content)
			}
		})
	}
}

// racingThreads runs before, once, ahead of the first thread write: a
// write of another request landing between a turn's read and its write.
type racingThreads struct {
	store.Store
	before func()
	once   sync.Once
}

func (s *racingThreads) PutThread(ctx context.Context, project, id string, data []byte, until time.Time, rev int64, key string) (int64, error) {
	s.once.Do(s.before)
	return s.Store.(ThreadContent).PutThread(ctx, project, id, data, until, rev, key)
}

// TestThreadRetryLandsAfterItsFirstAttempt: a retry that began before
// its first attempt was stored (the client gave up on it while it ran)
// finds, when it writes, the thread changed by that attempt: its answer
// replaces that attempt's, rather than the turn being stored twice.
func TestThreadRetryLandsAfterItsFirstAttempt(t *testing.T) {
	base := contentStore(t, 24)
	tc := base.(ThreadContent)
	st := &racingThreads{Store: base}
	_, engURL := startSeenEngine(t, "big")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: engURL, Weight: 1}})
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	turnX := `{"role":"user","content":"X"}`
	st.before = func() {
		// The first attempt of the same request ends now.
		sum := sha256.Sum256([]byte("k1"))
		if _, err := tc.PutThread(t.Context(), "proj", "t1", []byte(`[`+turnX+`,{"role":"assistant","content":"first attempt"}]`),
			time.Now().Add(time.Hour), 0, hex.EncodeToString(sum[:16])); err != nil {
			t.Error(err)
		}
	}
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"
	h["Idempotency-Key"] = "k1"
	c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, `{"model":"big","max_tokens":8,"messages":[`+turnX+`]}`)
	if c.status != 200 || c.header.Get("X-Llmgw-Thread-Unsaved") != "" {
		t.Fatalf("retry: %d %v %s", c.status, c.header, c.raw)
	}
	th, err := tc.GetThread(t.Context(), "proj", "t1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(th.Messages, &msgs)
	answer := c.body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	if got := contents(msgs); got != "user:X | assistant:"+answer {
		t.Fatalf("the thread holds %q; want the turn once, with the answer the client got (%q)", got, answer)
	}
}
