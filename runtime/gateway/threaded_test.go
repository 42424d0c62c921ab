package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
)

// TestThreadsOnMessagesAndResponses: one thread continued by turns in
// three APIs (Responses through openai-go v3, unmodified, with the header
// as a request option; Anthropic Messages; chat completions): each turn
// is sent the turns before it, whatever API they came in, and answered
// in its own API's shape. A response made on a thread is stored with the
// whole conversation, so previous_response_id from it continues it too;
// previous_response_id together with a thread is refused, and so is a
// thread of a project that keeps none, in the API's error shape.
func TestThreadsOnMessagesAndResponses(t *testing.T) {
	st := contentStore(t, 24)
	if err := st.CreateProject(t.Context(), store.Project{Name: "off"}); err != nil {
		t.Fatal(err)
	}
	eng, engURL := startSeenEngine(t, "big")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: engURL, Weight: 1}})
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	ctx := t.Context()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("key-proj"), option.WithMaxRetries(0))
	onThread := option.WithHeader("X-Llmgw-Thread", "mixed")

	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "big",
		Instructions: openai.String("be brief"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("my name is Ada")},
	}, onThread)
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(eng.last(t)); got != "system:be brief | user:my name is Ada" {
		t.Fatalf("first turn sent %q", got)
	}
	answer1 := first.OutputText()

	// The second turn, in Anthropic's API, is sent the first.
	c := do(t, http.MethodPost, srv.URL+"/v1/messages", map[string]string{"X-Api-Key": "key-proj", "Anthropic-Version": "2023-06-01",
		"X-Llmgw-Thread": "mixed"}, `{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"what is my name?"}]}`)
	if c.status != 200 || c.body["type"] != "message" {
		t.Fatalf("messages turn on the thread: %d %s", c.status, c.raw)
	}
	want := "system:be brief | user:my name is Ada | assistant:" + answer1 + " | user:what is my name?"
	if got := contents(eng.last(t)); got != want {
		t.Fatalf("messages turn sent %q, want %q", got, want)
	}
	answer2 := c.body["content"].([]any)[0].(map[string]any)["text"].(string)

	// The third, a streamed response, is sent both.
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "big",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")},
	}, onThread)
	var third *responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			r := ev.Response
			third = &r
		}
	}
	if err := stream.Err(); err != nil || third == nil {
		t.Fatalf("streamed response on the thread: %v", err)
	}
	want += " | assistant:" + answer2 + " | user:and then?"
	if got := contents(eng.last(t)); got != want {
		t.Fatalf("streamed turn sent %q, want %q", got, want)
	}
	want += " | assistant:" + third.OutputText()

	// A chat completion on the thread sees all three.
	c = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer key-proj", "X-Llmgw-Thread": "mixed"},
		`{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"last"}]}`)
	if c.status != 200 {
		t.Fatalf("chat turn: %d %s", c.status, c.raw)
	}
	if got := contents(eng.last(t)); got != want+" | user:last" {
		t.Fatalf("chat turn sent %q, want %q", got, want+" | user:last")
	}

	// The streamed response was stored with the conversation it was
	// sent: previous_response_id from it, without the thread, has it.
	if _, err := client.Responses.Get(ctx, third.ID, responses.ResponseGetParams{}); err != nil {
		t.Fatalf("GET of a response made on a thread: %v", err)
	}
	if _, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "big",
		PreviousResponseID: openai.String(third.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("off the thread")},
	}); err != nil {
		t.Fatal(err)
	}
	if got := contents(eng.last(t)); got != want+" | user:off the thread" {
		t.Fatalf("previous_response_id of a thread's response sent %q, want %q", got, want+" | user:off the thread")
	}

	// Both ways of continuing at once: refused, naming the field.
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "big",
		PreviousResponseID: openai.String(third.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("both")},
	}, onThread)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unsupported_value" || apiErr.Param != "previous_response_id" ||
		!strings.Contains(apiErr.Message, "x-llmgw-thread") {
		t.Fatalf("previous_response_id on a thread: %v", err)
	}

	// A project that keeps no conversations: Anthropic's error shape.
	c = do(t, http.MethodPost, srv.URL+"/v1/messages", map[string]string{"X-Api-Key": "key-off", "X-Llmgw-Thread": "t1"},
		`{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	var ae struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(c.raw), &ae); err != nil || c.status != 400 || ae.Type != "error" ||
		ae.Error.Type != "invalid_request_error" || !strings.Contains(ae.Error.Message, "does not keep conversations") {
		t.Fatalf("messages on a thread of a project that keeps none: %d %s", c.status, c.raw)
	}
	stored, err := st.GetThread(ctx, "proj", "mixed", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(stored.Messages, &msgs)
	if len(msgs) != 9 {
		t.Fatalf("the thread holds %d messages, want 9 (a system message and four turns): %s", len(msgs), contents(msgs))
	}
}

// busyThreads is a store whose threads change on every write: each
// write conflicts, as when other turns of the thread end at once.
type busyThreads struct{ store.Store }

func (b busyThreads) PutThread(context.Context, string, string, []byte, time.Time, int64, string) (int64, error) {
	return 0, fmt.Errorf("storing thread: %w", store.ErrConflict)
}

// TestThreadTurnNotStoredIsSaid: a turn whose answer the client gets
// but which cannot be stored in its thread is never dropped in silence:
// a non-streamed answer carries x-llmgw-thread-unsaved; a stream says
// so in an SSE comment line before its last event, on chat completions,
// Messages and Responses, which official SDKs skip (openai-go v3 sees a
// whole, successful answer); each is logged and counted.
func TestThreadTurnNotStoredIsSaid(t *testing.T) {
	st := busyThreads{contentStore(t, 24)}
	_, engURL := startSeenEngine(t, "big")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: engURL, Weight: 1}})
	var logs syncBuffer
	gw := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"

	c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, `{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	if c.status != 200 || !strings.Contains(c.header.Get("X-Llmgw-Thread-Unsaved"), "not kept") || answerText(t, c.raw, false) == "" {
		t.Fatalf("non-streamed turn not stored: %d %v %s", c.status, c.header, c.raw)
	}
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("key-proj"), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model: "big", MaxTokens: openai.Int(8),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("and then?")},
	}, option.WithHeader("X-Llmgw-Thread", "t1"))
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || text.Len() == 0 {
		t.Fatalf("streamed turn not stored: text %q, stream error %v; want the whole answer and no error", text.String(), err)
	}
	hc := bearer("key-proj")
	hc["X-Llmgw-Thread"] = "t1"
	c = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", hc, `{"model":"big","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"again"}]}`)
	if at := strings.Index(c.raw, "\n: llmgw thread_not_stored: "); c.status != 200 || at < 0 || !strings.Contains(c.raw[at:], "not kept") ||
		!strings.HasSuffix(c.raw, "data: [DONE]\n\n") || strings.Contains(c.raw, `"error"`) {
		t.Fatalf("chat stream not stored: %d %s", c.status, c.raw)
	}
	for _, tt := range []struct{ path, body, last string }{
		{"/v1/messages", `{"model":"big","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"more"}]}`, "event: message_stop\n"},
		{"/v1/responses", `{"model":"big","max_output_tokens":8,"stream":true,"input":"more"}`, "event: response.completed\n"},
	} {
		c := do(t, http.MethodPost, srv.URL+tt.path, h, tt.body)
		at := strings.Index(c.raw, "\n: llmgw thread_not_stored: ")
		if c.status != 200 || at < 0 || !strings.Contains(c.raw[at:], "not kept") || !strings.Contains(c.raw[at:], tt.last) ||
			strings.Contains(c.raw, "event: error") || strings.Contains(c.raw, "thread_not_stored\"") {
			t.Fatalf("%s stream not stored: %d %s", tt.path, c.status, c.raw)
		}
	}
	c = do(t, http.MethodPost, srv.URL+"/v1/messages", h, `{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"more"}]}`)
	if c.status != 200 || c.body["type"] != "message" || !strings.Contains(c.header.Get("X-Llmgw-Thread-Unsaved"), "not kept") {
		t.Fatalf("non-streamed messages turn not stored: %d %v %s", c.status, c.header, c.raw)
	}
	if n := gw.ThreadTurnsNotStored(); n != 6 {
		t.Fatalf("ThreadTurnsNotStored = %d, want 6", n)
	}
	if n := strings.Count(logs.String(), "this turn was not kept"); n != 6 {
		t.Fatalf("%d warnings logged, want 6:\n%s", n, logs.String())
	}
}

// stalledThreads is a store whose thread writes hang (a stalled
// connection, a lock held) until their context ends, or for 3 s, when
// they land.
type stalledThreads struct{ store.Store }

func (s stalledThreads) PutThread(ctx context.Context, project, id string, data []byte, until time.Time, rev int64, key string) (int64, error) {
	select {
	case <-ctx.Done():
		return 0, fmt.Errorf("storing thread: %w", ctx.Err())
	case <-time.After(3 * time.Second):
		return s.Store.(ThreadContent).PutThread(ctx, project, id, data, until, rev, key)
	}
}

// TestThreadStalledStoreDoesNotHoldTheAnswer: a store write that hangs
// holds a thread's answer for threadWriteTimeout at most; the turn then
// counts as not stored and the answer ends as usual, said so.
func TestThreadStalledStoreDoesNotHoldTheAnswer(t *testing.T) {
	st := stalledThreads{contentStore(t, 24)}
	_, engURL := startSeenEngine(t, "big")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: engURL, Weight: 1}})
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	gw.threadWriteTimeout = 100 * time.Millisecond
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"
	for _, tt := range []struct{ body, want string }{
		{`{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, ""},
		{`{"model":"big","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ": llmgw thread_not_stored: "},
	} {
		start := time.Now()
		c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, tt.body)
		took := time.Since(start)
		why := c.header.Get("X-Llmgw-Thread-Unsaved")
		if tt.want != "" {
			at := strings.Index(c.raw, tt.want)
			if at < 0 || !strings.HasSuffix(c.raw, "data: [DONE]\n\n") {
				t.Fatalf("stream on a stalled store: %s", c.raw)
			}
			why = c.raw[at:]
		}
		if c.status != 200 || took > 2*time.Second || !strings.Contains(why, "did not answer within 100ms") {
			t.Fatalf("answer on a stalled store: %d after %v, said %q: %s", c.status, took, why, c.raw)
		}
	}
	if n := gw.ThreadTurnsNotStored(); n != 2 {
		t.Fatalf("ThreadTurnsNotStored = %d, want 2", n)
	}
}

// syncBuffer is a log sink safe for a handler's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestThreadKeptBoundedByContext: a thread keeps at most twice what its
// model's context holds (context_length × 4 bytes × 2), not a request
// body's bound: past it, its oldest turns fall out and the last stays.
func TestThreadKeptBoundedByContext(t *testing.T) {
	st := contentStore(t, 24)
	_, engURL := startSeenEngine(t, "small")
	rt := router.New()
	rt.SetEndpoints("small", []router.Endpoint{{ReplicaID: "small-0", URL: engURL, Weight: 1}})
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	bound := twoModelLimits["small"].ContextLength * 4 * 2
	// Markup too: it is stored as sent, not HTML-escaped to six times
	// its size past what the bound counted.
	for _, tt := range []struct{ thread, filler string }{{"capped", strings.Repeat("x", 400)}, {"markup", strings.Repeat("<", 150)}} {
		h := bearer("key-proj")
		h["X-Llmgw-Thread"] = tt.thread
		for i := range 8 {
			turn := fmt.Sprintf("turn%d %s", i, tt.filler)
			c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, `{"model":"small","max_tokens":4,"messages":[{"role":"user","content":"`+turn+`"}]}`)
			if c.status != 200 || c.header.Get("X-Llmgw-Thread-Unsaved") != "" {
				t.Fatalf("%s turn %d: %d %v %s", tt.thread, i, c.status, c.header, c.raw)
			}
		}
		stored, err := st.(ThreadContent).GetThread(t.Context(), "proj", tt.thread, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(stored.Messages) > bound || bytes.Contains(stored.Messages, []byte("turn0 ")) || !bytes.Contains(stored.Messages, []byte("turn7 ")) {
			t.Fatalf("thread %s keeps %d bytes (bound %d): %.300s", tt.thread, len(stored.Messages), bound, stored.Messages)
		}
	}
}

// gatedThreads is a store whose thread writes wait, once entered says
// so, until release is closed (or their context ends).
type gatedThreads struct {
	store.Store
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *gatedThreads) PutThread(ctx context.Context, project, id string, data []byte, until time.Time, rev int64, key string) (int64, error) {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-ctx.Done():
		return 0, fmt.Errorf("storing thread: %w", ctx.Err())
	case <-s.release:
	}
	return s.Store.(ThreadContent).PutThread(ctx, project, id, data, until, rev, key)
}

// TestThreadStoreWriteHoldsOnlyTheEnd: while a streamed turn is stored,
// the client already has every event the engine sent before its end (the
// last tokens and the finish chunk that came in one read with [DONE] are
// flushed before the write), and the replica is given back (its
// in-flight count is 0): the write holds only the stream's last event.
func TestThreadStoreWriteHoldsOnlyTheEnd(t *testing.T) {
	chunk := func(delta, finish string) string {
		fin := "null"
		if finish != "" {
			fin = `"` + finish + `"`
		}
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` +
			delta + `"},"finish_reason":` + fin + `}]}` + "\n\n"
	}
	// The engine sends its first token, then the last, the finish chunk
	// and [DONE] in one write.
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, chunk("hello ", ""))
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, chunk("lastword", "")+chunk("", "stop")+"data: [DONE]\n\n")
	}))
	t.Cleanup(eng.Close)
	rt := router.New()
	rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "m-0", URL: eng.URL, Weight: 1}})
	for _, tt := range []struct{ path, body, owed string }{
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, `"finish_reason":"stop"`},
		{"/v1/messages", `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, `lastword`},
	} {
		st := &gatedThreads{Store: contentStore(t, 24), entered: make(chan struct{}), release: make(chan struct{})}
		gw := New(Config{}, Deps{Catalog: unsizedCatalog{}, Auth: projectAuth{}, Routes: rt, Content: st})
		srv := httptest.NewServer(gw.Handler())
		t.Cleanup(func() { srv.Close(); gw.Close() })
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Authorization", "Bearer key-proj")
		req.Header.Set("X-Llmgw-Thread", "t1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		reads := make(chan []byte)
		go func() {
			defer close(reads)
			for {
				b := make([]byte, 4096)
				n, err := resp.Body.Read(b)
				if n > 0 {
					reads <- b[:n]
				}
				if err != nil {
					return
				}
			}
		}()
		select {
		case <-st.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the turn was never stored", tt.path)
		}
		var got []byte
		deadline := time.After(5 * time.Second)
		for !bytes.Contains(got, []byte(tt.owed)) {
			select {
			case b := <-reads:
				got = append(got, b...)
			case <-deadline:
				close(st.release)
				t.Fatalf("%s: while the turn is stored the client has only %q; want what came before the end (%s)", tt.path, got, tt.owed)
			}
		}
		if n := rt.Snapshot()["m"][0].InFlight; n != 0 {
			close(st.release)
			t.Fatalf("%s: the replica holds %d requests while a whole answer is stored, want 0", tt.path, n)
		}
		close(st.release)
		for b := range reads {
			got = append(got, b...)
		}
		if !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) && !bytes.Contains(got, []byte("event: message_stop")) {
			t.Fatalf("%s: the stream did not end: %s", tt.path, got)
		}
		if th, err := st.GetThread(t.Context(), "proj", "t1", time.Now()); err != nil || !bytes.Contains(th.Messages, []byte("hello lastword")) {
			t.Fatalf("%s: the thread holds %s, %v", tt.path, th.Messages, err)
		}
	}
}

// TestThreadUnreadableAnswerIsSaid: a whole answer the gateway cannot
// read as a chat completion is relayed, and the turn, not kept, is said
// to be so (header, counter), as any turn not stored is.
func TestThreadUnreadableAnswerIsSaid(t *testing.T) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":"not a list"}`)
	}))
	t.Cleanup(eng.Close)
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: eng.URL, Weight: 1}})
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: contentStore(t, 24)})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	h := bearer("key-proj")
	h["X-Llmgw-Thread"] = "t1"
	c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, `{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	if c.status != 200 || !strings.Contains(c.header.Get("X-Llmgw-Thread-Unsaved"), "could not be read") || gw.ThreadTurnsNotStored() != 1 {
		t.Fatalf("status %d, x-llmgw-thread-unsaved %q, turns not stored %d; want 200, the answer said not kept, 1",
			c.status, c.header.Get("X-Llmgw-Thread-Unsaved"), gw.ThreadTurnsNotStored())
	}
}

// gatedResponses holds the first stored response until released.
type gatedResponses struct {
	store.Store
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *gatedResponses) PutResponse(ctx context.Context, r store.StoredResponse) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return s.Store.PutResponse(ctx, r)
}

// TestStoredResponseFreesReplicaFirst: a /v1/responses answer kept for
// previous_response_id gives its replica back once the engine's answer is
// whole, before the store write, as a thread's turn does.
func TestStoredResponseFreesReplicaFirst(t *testing.T) {
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(eng.Close)
	rt := router.New()
	rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "m-0", URL: eng.URL, Weight: 1}})
	st := &gatedResponses{Store: contentStore(t, 24), entered: make(chan struct{}), release: make(chan struct{})}
	gw := New(Config{}, Deps{Catalog: unsizedCatalog{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/responses", strings.NewReader(`{"model":"m","stream":true,"input":"hi"}`))
		req.Header.Set("Authorization", "Bearer key-proj")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the response was never stored")
	}
	n := rt.Snapshot()["m"][0].InFlight
	close(st.release)
	<-done
	if n != 0 {
		t.Fatalf("the replica holds %d requests while a whole answer is stored, want 0", n)
	}
}
