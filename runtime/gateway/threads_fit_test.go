package gateway

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/sim/simengine"
)

// shortEngine is a sim engine whose context (maxModelLen words) is far
// shorter than the catalog says (twoModels' "big": 8192), so a thread
// the gateway fits to the catalog is refused for its length. As
// llama-server (llama) it words that refusal as llama-server does. It
// keeps the messages of every request and can hold requests until a
// number of them arrived (hold).
type shortEngine struct {
	eng   *simengine.Engine
	llama bool
	mu    sync.Mutex
	seen  [][]map[string]any
	codes []int
	// hold, when above 0, holds each request until that many arrived
	// (counting all the engine got); release is closed then.
	hold    int
	release chan struct{}
	// gate, when set, holds every request until it is closed; each
	// request held is sent on arrived first.
	gate, arrived chan struct{}
}

var vllmContextWords = regexp.MustCompile(`maximum context length is (\d+) tokens. However, your request has (\d+) input tokens`)

func (e *shortEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var v struct {
		Messages []map[string]any `json:"messages"`
	}
	_ = json.Unmarshal(body, &v)
	e.mu.Lock()
	e.seen = append(e.seen, v.Messages)
	n, hold, release, gate, arrived := len(e.seen), e.hold, e.release, e.gate, e.arrived
	if hold > 0 && n == hold {
		close(release) // the last one held has arrived
	}
	e.mu.Unlock()
	if hold > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-release:
		}
	}
	if gate != nil {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			return
		case <-gate:
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	e.eng.Handler().ServeHTTP(rec, r)
	e.mu.Lock()
	e.codes = append(e.codes, rec.Code)
	e.mu.Unlock()
	out := rec.Body.Bytes()
	if m := vllmContextWords.FindSubmatch(out); rec.Code == http.StatusBadRequest && m != nil && e.llama {
		limit, _ := strconv.Atoi(string(m[1]))
		prompt, _ := strconv.Atoi(string(m[2]))
		out, _ = json.Marshal(map[string]any{"error": map[string]any{"code": 400,
			"message": fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens), try increasing it", prompt, limit),
			"type":    "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": limit}})
	}
	for k, vv := range rec.Header() {
		w.Header()[k] = vv
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	_, _ = w.Write(out)
}

// words is what the sim engine counts as the prompt of messages.
func words(msgs []map[string]any) int {
	n := 0
	for _, m := range msgs {
		c, _ := m["content"].(string)
		n += len(strings.Fields(c))
	}
	return n
}

func startShortEngine(t *testing.T, maxModelLen int, llama bool) (*shortEngine, *router.Router) {
	t.Helper()
	eng, err := simengine.New(simengine.Config{ServedModelName: "big", EOSAfter: 3, MaxModelLen: maxModelLen}, nil)
	if err != nil {
		t.Fatal(err)
	}
	se := &shortEngine{eng: eng, llama: llama}
	srv := httptest.NewServer(se)
	t.Cleanup(srv.Close)
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: srv.URL, Weight: 1}})
	return se, rt
}

// answerText is the text of a chat answer, streamed or not.
func answerText(t *testing.T, raw string, stream bool) string {
	t.Helper()
	if !stream {
		var v struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(raw), &v); err != nil || len(v.Choices) != 1 {
			t.Fatalf("answer %s: %v", raw, err)
		}
		return v.Choices[0].Message.Content
	}
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(raw))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) == nil && len(c.Choices) > 0 {
			b.WriteString(c.Choices[0].Delta.Content)
		}
	}
	return b.String()
}

// TestThreadFittedAgainAfterContextRefusal: when the engine refuses a
// thread's request for its length (vLLM's words, as the sim engine
// says it, and llama-server's), the gateway sends it once more with the
// history fitted to the context the engine named, and the client gets
// the answer, told how many turns were left out; the usage charged is
// the request that was served, not the one refused; the thread keeps
// what was sent. Later turns of the model's threads are fitted to what
// the refusal told, and not refused again.
func TestThreadFittedAgainAfterContextRefusal(t *testing.T) {
	for _, tt := range []struct {
		name          string
		llama, stream bool
	}{
		{"vllm", false, false},
		{"vllm stream", false, true},
		{"llama-server", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const maxModelLen, maxTokens = 60, 8
			st := contentStore(t, 24)
			eng, rt := startShortEngine(t, maxModelLen, tt.llama)
			adm := &recordingAdmission{}
			records := make(chan request.Record, 64)
			gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st, Admission: adm,
				Observer: ObserverFunc(func(r request.Record) { records <- r })})
			srv := httptest.NewServer(gw.Handler())
			t.Cleanup(func() { srv.Close(); gw.Close() })
			turn := func(i int, stream bool) call {
				t.Helper()
				body, _ := json.Marshal(map[string]any{"model": "big", "max_tokens": maxTokens, "stream": stream,
					"messages": []map[string]string{{"role": "user", "content": "turn " + strconv.Itoa(i) + " with six more words here"}}})
				h := bearer("key-proj")
				h["X-Llmgw-Thread"] = "t1"
				return do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, string(body))
			}
			// Each turn is 8 words and its answer 3: the sixth turn's
			// prompt passes the engine's 60.
			refused := -1
			for i := range 10 {
				eng.mu.Lock()
				before := len(eng.seen)
				eng.mu.Unlock()
				stream := tt.stream && i >= 5
				c := turn(i, stream)
				if c.status != 200 {
					t.Fatalf("turn %d: %d %s", i, c.status, c.raw)
				}
				u := adm.settled(t)
				rec := <-records
				eng.mu.Lock()
				sent, codes := eng.seen[before:], eng.codes[before:]
				eng.mu.Unlock()
				switch len(sent) {
				case 1:
					if c.header.Get("X-Llmgw-Thread-Trimmed") != "" && refused < 0 {
						t.Fatalf("turn %d trimmed without a refusal", i)
					}
					if n := words(sent[0]); refused >= 0 && n > maxModelLen-maxTokens {
						t.Fatalf("turn %d after the refusal: %d words sent; want it fitted to %d-%d", i, n, maxModelLen, maxTokens)
					}
					continue
				case 2:
				default:
					t.Fatalf("turn %d sent %d times", i, len(sent))
				}
				if refused >= 0 {
					// The first refusal told the engine's context: later
					// turns are fitted to it at once.
					t.Fatalf("turn %d refused again after turn %d's refusal told the engine's context", i, refused)
				}
				refused = i
				if codes[0] != 400 || codes[1] != 200 {
					t.Fatalf("turn %d: the engine answered %v, want a refusal then the answer", i, codes)
				}
				first, second := words(sent[0]), words(sent[1])
				if first < maxModelLen || second > maxModelLen-maxTokens {
					t.Fatalf("turn %d: refused at %d words, sent again at %d; want it to fit %d-%d", i, first, second, maxModelLen, maxTokens)
				}
				if last := sent[1][len(sent[1])-1]; last["content"] != "turn "+strconv.Itoa(i)+" with six more words here" {
					t.Fatalf("turn %d: fitted again without its new turn: %v", i, sent[1])
				}
				dropped, _ := strconv.Atoi(c.header.Get("X-Llmgw-Thread-Trimmed"))
				if dropped < 1 || (len(sent[0])-len(sent[1]))/2 != dropped {
					t.Fatalf("turn %d: x-llmgw-thread-trimmed %q, but %d messages were dropped", i, c.header.Get("X-Llmgw-Thread-Trimmed"), len(sent[0])-len(sent[1]))
				}
				// Charged what was served: the sim counts the words sent
				// the second time.
				if u.PromptTokens != second || !u.Reported || rec.PromptTokens != second || rec.Status != 200 {
					t.Fatalf("turn %d: settled %+v, recorded %d prompt tokens (status %d); want the %d of the request served",
						i, u, rec.PromptTokens, rec.Status, second)
				}
				// The thread keeps every turn, those left out of what
				// was sent too, and the answer.
				stored, err := st.GetThread(t.Context(), "proj", "t1", time.Now())
				if err != nil {
					t.Fatal(err)
				}
				var msgs []map[string]any
				_ = json.Unmarshal(stored.Messages, &msgs)
				if len(msgs) != 2*(i+1) || msgs[0]["content"] != "turn 0 with six more words here" || msgs[len(msgs)-1]["content"] != answerText(t, c.raw, stream) {
					t.Fatalf("turn %d: stored %d messages (first %v, last %v), want all %d and the answer %q", i, len(msgs), msgs[0], msgs[len(msgs)-1], 2*(i+1), answerText(t, c.raw, stream))
				}
			}
			if refused < 0 {
				t.Fatal("no turn was refused: the test does not test the refit")
			}
		})
	}
}

// TestThreadTurnsAtOnce: two turns sent at once on one thread both land
// in it, each followed by its own answer, in the order their answers
// ended; neither is lost.
func TestThreadTurnsAtOnce(t *testing.T) {
	st := contentStore(t, 24)
	eng, rt := startShortEngine(t, 8192, false)
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	turn := func(content string) call {
		body, _ := json.Marshal(map[string]any{"model": "big", "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		h := bearer("key-proj")
		h["X-Llmgw-Thread"] = "t1"
		return do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, string(body))
	}
	if c := turn("first words"); c.status != 200 {
		t.Fatalf("first turn: %d %s", c.status, c.raw)
	}
	for round := range 3 {
		// Both requests reach the engine with the same history before
		// either is answered.
		eng.mu.Lock()
		eng.hold, eng.release = len(eng.seen)+2, make(chan struct{})
		eng.mu.Unlock()
		var wg sync.WaitGroup
		calls := make([]call, 2)
		for i := range calls {
			wg.Go(func() { calls[i] = turn(fmt.Sprintf("round %d turn %c", round, 'a'+i)) })
		}
		wg.Wait()
		for i, c := range calls {
			if c.status != 200 {
				t.Fatalf("round %d turn %d: %d %s", round, i, c.status, c.raw)
			}
		}
		stored, err := st.GetThread(t.Context(), "proj", "t1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var msgs []map[string]any
		_ = json.Unmarshal(stored.Messages, &msgs)
		if len(msgs) != 2+4*(round+1) {
			t.Fatalf("round %d: the thread holds %d messages, want %d: %s", round, len(msgs), 2+4*(round+1), contents(msgs))
		}
		tail := msgs[len(msgs)-4:]
		for i, c := range calls {
			want := fmt.Sprintf("round %d turn %c", round, 'a'+i)
			at := -1
			for j, m := range tail {
				if m["role"] == "user" && m["content"] == want {
					at = j
				}
			}
			if at < 0 || at%2 != 0 || tail[at+1]["role"] != "assistant" || tail[at+1]["content"] != answerText(t, c.raw, false) {
				t.Fatalf("round %d: turn %q is not followed by its answer %q in %s", round, want, answerText(t, c.raw, false), contents(msgs))
			}
		}
	}
	eng.mu.Lock()
	eng.hold = 0
	eng.mu.Unlock()
	// The next turn sees both of the last round's turns.
	if c := turn("after"); c.status != 200 {
		t.Fatalf("next turn: %d %s", c.status, c.raw)
	}
	eng.mu.Lock()
	last := eng.seen[len(eng.seen)-1]
	eng.mu.Unlock()
	if len(last) != 2+4*3+1 {
		t.Fatalf("the next turn was sent %d messages, want %d: %s", len(last), 2+4*3+1, contents(last))
	}
}

// TestThreadDeletedDuringTurn: a thread deleted while a turn runs is
// begun again with that turn alone, not brought back whole.
func TestThreadDeletedDuringTurn(t *testing.T) {
	st := contentStore(t, 24)
	eng, rt := startShortEngine(t, 8192, false)
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"
	turn := func(content string) call {
		body, _ := json.Marshal(map[string]any{"model": "big", "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		return do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, string(body))
	}
	if c := turn("forget me"); c.status != 200 {
		t.Fatalf("first turn: %d %s", c.status, c.raw)
	}
	eng.mu.Lock()
	eng.gate, eng.arrived = make(chan struct{}), make(chan struct{}, 1)
	eng.mu.Unlock()
	done := make(chan call, 1)
	go func() { done <- turn("after the delete") }()
	<-eng.arrived
	if c := do(t, http.MethodDelete, srv.URL+"/v1/threads/t1", bearer("key-proj"), ""); c.status != 200 {
		t.Fatalf("delete: %d %s", c.status, c.raw)
	}
	close(eng.gate)
	c := <-done
	if c.status != 200 {
		t.Fatalf("turn during the delete: %d %s", c.status, c.raw)
	}
	stored, err := st.GetThread(t.Context(), "proj", "t1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(stored.Messages, &msgs)
	if got, want := contents(msgs), "user:after the delete | assistant:"+answerText(t, c.raw, false); got != want {
		t.Fatalf("the thread after a delete during a turn holds %q, want %q", got, want)
	}
}

// TestThreadFitStaysInItsProject: one project's length refusal (a turn
// of dense text too long by itself) changes nothing of what another
// project's threads are sent or keep: the other project's thread, well
// within the engine's context, is sent whole, once, and keeps every
// turn.
func TestThreadFitStaysInItsProject(t *testing.T) {
	const maxModelLen = 200
	st := contentStore(t, 24)
	for _, p := range []string{"a", "b"} {
		if err := st.CreateProject(t.Context(), store.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetRetention(t.Context(), p, store.ContentThreads, 24); err != nil {
			t.Fatal(err)
		}
	}
	eng, rt := startShortEngine(t, maxModelLen, false)
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	turn := func(key, thread, content string) call {
		body, _ := json.Marshal(map[string]any{"model": "big", "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": content}}})
		h := bearer(key)
		h["X-Llmgw-Thread"] = thread
		return do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, string(body))
	}
	long := strings.Repeat("extraordinarily ", 5)
	for i := range 4 {
		if c := turn("key-b", "tb", long+string(rune('A'+i))); c.status != 200 {
			t.Fatalf("b turn %d: %d %s", i, c.status, c.raw)
		}
	}
	// Project a: one turn of dense text past the engine's context.
	if c := turn("key-a", "ta", strings.TrimSpace(strings.Repeat("a ", 250))); c.status != 400 {
		t.Fatalf("a's turn past the engine's context: %d %s", c.status, c.raw)
	}
	eng.mu.Lock()
	before := len(eng.seen)
	eng.mu.Unlock()
	c := turn("key-b", "tb", long+"E")
	if c.status != 200 {
		t.Fatalf("b turn 5: %d %s", c.status, c.raw)
	}
	eng.mu.Lock()
	sent := eng.seen[before:]
	eng.mu.Unlock()
	if len(sent) != 1 || len(sent[0]) != 9 || c.header.Get("X-Llmgw-Thread-Trimmed") != "" {
		t.Fatalf("b's 5th turn (%d words, engine context %d) after a's refusal: sent %d times, %d messages, trimmed %q; want once, whole (9 messages)",
			words(sent[0]), maxModelLen, len(sent), len(sent[0]), c.header.Get("X-Llmgw-Thread-Trimmed"))
	}
	stored, err := st.GetThread(t.Context(), "b", "tb", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(stored.Messages, &msgs)
	if len(msgs) != 10 {
		t.Fatalf("b's thread holds %d messages after 5 turns, want 10", len(msgs))
	}
}

// TestFitMemoryKeys: what a refusal told is kept for the project, the
// model and the replica that refused (the context) and for the thread
// (its rate); an answer updates a remembered rate, and adds one only
// for a thread answered by a replica whose context is remembered.
func TestFitMemoryKeys(t *testing.T) {
	var m fitMemory
	m.learn("p", "big", "big-0", "t1", engineFit{limit: 100, ratio: 1.5})
	if l, ok := m.limitOf("p", "big", "big-0"); !ok || l != 100 {
		t.Fatalf("the replica that refused: %d, %v", l, ok)
	}
	for _, k := range [][3]string{{"q", "big", "big-0"}, {"p", "big", "big-1"}, {"p", "small", "big-0"}} {
		if _, ok := m.limitOf(k[0], k[1], k[2]); ok {
			t.Fatalf("context known for %v, which did not refuse", k)
		}
	}
	if r, ok := m.ratioOf("p", "t1", "big"); !ok || r != 1.5 {
		t.Fatalf("the thread's rate: %v, %v", r, ok)
	}
	for _, k := range [][3]string{{"q", "t1", "big"}, {"p", "t2", "big"}, {"p", "t1", "small"}} {
		if r, ok := m.ratioOf(k[0], k[1], k[2]); ok || r != 1 {
			t.Fatalf("rate known for %v: %v", k, r)
		}
	}
	m.rated("p", "t1", "big", "big-1", 0.8)
	m.rated("p", "t2", "big", "big-0", 0.7)
	m.rated("p", "t3", "big", "big-1", 3)
	if r, _ := m.ratioOf("p", "t1", "big"); r != 0.8 {
		t.Fatalf("rate after an answer: %v, want 0.8", r)
	}
	if r, _ := m.ratioOf("p", "t2", "big"); r != 0.7 {
		t.Fatalf("rate of a thread answered by the replica whose context is known: %v, want 0.7", r)
	}
	if _, ok := m.ratioOf("p", "t3", "big"); ok {
		t.Fatal("an answer remembered a rate of a thread fitted to nothing a refusal told")
	}
}

type noMaxCatalog struct{}

func (noMaxCatalog) Lookup(name string) (request.Model, bool) {
	return request.Model{Name: name, Limits: request.Limits{ContextLength: 8192}}, name == "m"
}
func (noMaxCatalog) List() []ModelInfo { return []ModelInfo{{ID: "m"}} }

// vllmRule refuses as vLLM does: a prompt (its words) at or past the
// context, or a prompt and max_tokens past it, each in vLLM's words.
type vllmRule struct {
	limit int
	mu    sync.Mutex
	codes []int
}

func (e *vllmRule) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var v struct {
		Messages  []map[string]any `json:"messages"`
		MaxTokens int              `json:"max_tokens"`
		MaxComp   int              `json:"max_completion_tokens"`
	}
	_ = json.Unmarshal(body, &v)
	mt := max(v.MaxTokens, v.MaxComp)
	p := words(v.Messages)
	code := 200
	var out any
	switch {
	case p >= e.limit:
		code = 400
		out = map[string]any{"error": map[string]any{"message": fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", e.limit, p), "type": "BadRequestError", "code": 400}}
	case p+mt > e.limit:
		code = 400
		out = map[string]any{"error": map[string]any{"message": fmt.Sprintf("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).", mt, e.limit, p, mt, e.limit, p), "type": "BadRequestError", "code": 400}}
	default:
		out = map[string]any{"id": "x", "object": "chat.completion", "model": "m", "choices": []map[string]any{{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": "ok ok ok"}}},
			"usage": map[string]any{"prompt_tokens": p, "completion_tokens": 3, "total_tokens": p + 3}}
	}
	e.mu.Lock()
	e.codes = append(e.codes, code)
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(out)
}

// TestThreadFitLeavesRoomForForwardedMaxTokens: a client that sends no
// max_tokens, on a model without max_output, is forwarded admission's
// bound (77 here); once the engine refused a turn for its length, the
// thread's later turns are fitted to leave room for that bound and are
// not refused again.
func TestThreadFitLeavesRoomForForwardedMaxTokens(t *testing.T) {
	st := contentStore(t, 24)
	eng := &vllmRule{limit: 200}
	es := httptest.NewServer(eng)
	t.Cleanup(es.Close)
	rt := router.New()
	rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "m-0", URL: es.URL, Weight: 1}})
	adm := &recordingAdmission{}
	gw := New(Config{}, Deps{Catalog: noMaxCatalog{}, Auth: projectAuth{}, Routes: rt, Content: st, Admission: adm})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	refusedTurns := 0
	for i := range 40 {
		eng.mu.Lock()
		before := len(eng.codes)
		eng.mu.Unlock()
		body, _ := json.Marshal(map[string]any{"model": "m",
			"messages": []map[string]string{{"role": "user", "content": "turn " + strconv.Itoa(i) + " with six more words here"}}})
		h := bearer("key-proj")
		h["X-Llmgw-Thread"] = "t1"
		c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, string(body))
		if c.status != 200 {
			t.Fatalf("turn %d: %d %s", i, c.status, strings.TrimSpace(c.raw))
		}
		adm.settled(t)
		eng.mu.Lock()
		codes := eng.codes[before:]
		eng.mu.Unlock()
		if len(codes) > 1 {
			refusedTurns++
		}
	}
	t.Logf("turns refused by the engine first (then sent again): %d of 40", refusedTurns)
	if refusedTurns != 1 {
		t.Errorf("%d turns were refused first; want the one that told the engine's context", refusedTurns)
	}
}

// TestThreadFromOlderReleaseContinued: a thread an older release wrote
// after this one migrated (a rolling upgrade; it inserts without naming
// revision) is continued by this one: the turn answered is kept.
func TestThreadFromOlderReleaseContinued(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmgw.db")
	st, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateProject(t.Context(), store.Project{Name: "proj"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetRetention(t.Context(), "proj", store.ContentThreads, 24); err != nil {
		t.Fatal(err)
	}
	// The older release's statement (before migration 0010).
	db, err := sql.Open("sqlite", path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	_, err = db.Exec(`INSERT INTO threads (project, id, messages, updated_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		"proj", "t1", `[{"role":"user","content":"hello"},{"role":"assistant","content":"hi"}]`, now.UnixMicro(), now.Add(24*time.Hour).UnixMicro())
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, rt := startShortEngine(t, 8192, false)
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"
	c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, `{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"second turn"}]}`)
	if c.status != 200 || c.header.Get("X-Llmgw-Thread-Unsaved") != "" {
		t.Fatalf("turn: %d %v %s", c.status, c.header, c.raw)
	}
	th, err := st.GetThread(t.Context(), "proj", "t1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(th.Messages, &msgs)
	if got := contents(msgs); len(msgs) != 4 || !strings.HasPrefix(got, "user:hello | assistant:hi | user:second turn | assistant:") {
		t.Fatalf("after a turn answered 200 the thread holds %q, want the older release's two messages, the turn and its answer", got)
	}
}

// TestFitMemoryRatedSweeps: rates that only answers add (a replica's
// context known, no later refusal) are swept past engineFitTTL too.
func TestFitMemoryRatedSweeps(t *testing.T) {
	var m fitMemory
	m.learn("p", "m", "r0", "t0", engineFit{limit: 1000, ratio: 1.2})
	old := time.Now().Add(-2 * engineFitTTL)
	m.mu.Lock()
	m.ratios[threadFit{"p", "stale", "m"}] = fitEntry{ratio: 1.1, at: old}
	m.swept = old
	m.mu.Unlock()
	m.rated("p", "t1", "m", "r0", 1.3)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.ratios[threadFit{"p", "stale", "m"}]; ok || len(m.ratios) != 2 {
		t.Fatalf("rates after rated past the TTL: %v; want t0 and t1, the stale one swept", m.ratios)
	}
}

// TestRatedForgetsExpired: a thread's rate past engineFitTTL, not swept
// yet, is not renewed by the next answer (with no replica limit known).
func TestRatedForgetsExpired(t *testing.T) {
	m := &fitMemory{limits: map[replicaFit]fitEntry{}, ratios: map[threadFit]fitEntry{}, swept: time.Now()}
	k := threadFit{"p", "t1", "m"}
	m.ratios[k] = fitEntry{ratio: 2, at: time.Now().Add(-engineFitTTL - time.Minute)}
	m.rated("p", "t1", "m", "r-1", 1.5)
	if r, ok := m.ratioOf("p", "t1", "m"); ok {
		t.Errorf("an expired rate was renewed: %v", r)
	}
}
