package gateway

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestEventNotHeldForTheNext: an event the engine sent is relayed at once
// even when the bytes that came with it begin the next event and the rest
// of that one has not arrived, or end with an event that carries no data
// (a keep-alive comment): the first event of a stream and any later one,
// on the chat completions passthrough and on a translated stream
// (/v1/messages).
func TestEventNotHeldForTheNext(t *testing.T) {
	chunk := func(s string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","model":"qwen/coder-3b","choices":[{"index":0,"delta":{"content":"` + s + `"},"finish_reason":null}]}` + "\n\n"
	}
	end := `data: {"id":"c1","object":"chat.completion.chunk","model":"qwen/coder-3b","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	// Each step is written and flushed at once; the engine then waits for
	// the client to have seen want (a word of the step's whole event)
	// before writing the next step.
	type step struct{ write, want string }
	for kind, steps := range map[string][]step{
		"split event": {
			{chunk("Alpha") + `data: {"id":"c1","objec`, "Alpha"},
			{`t":"chat.completion.chunk","model":"qwen/coder-3b","choices":[{"index":0,"delta":{"content":"Beta"},"finish_reason":null}]}` + "\n\n" +
				chunk("Gamma") + `data: {"id"`, "Gamma"},
			{`:"c1","object":"chat.completion.chunk","model":"qwen/coder-3b","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n", ""},
		},
		"comment after event": {
			{chunk("Alpha"), "Alpha"},
			{chunk("Beta") + ": keep-alive\n\n", "Beta"},
			{end, ""},
		},
	} {
		for _, tt := range []struct{ name, path, body string }{
			{"chat completions", "/v1/chat/completions", `{"model":"coder","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
			{"messages", "/v1/messages", `{"model":"coder","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				h := newHarness(t, 1, Config{}, nil)
				seen := make(chan struct{})
				h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
					w.Header().Set("Content-Type", "text/event-stream")
					rc := http.NewResponseController(w)
					for i, s := range steps {
						_, _ = w.Write([]byte(s.write))
						_ = rc.Flush()
						if i == len(steps)-1 {
							return
						}
						select {
						case <-seen:
						case <-time.After(5 * time.Second):
							// The gateway held the event back: the client never
							// saw it; end the stream so the test can say so.
							return
						case <-r.Context().Done():
							return
						}
					}
				}
				resp := h.post(t.Context(), tt.path, tt.body)
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				br := bufio.NewReader(resp.Body)
				for _, s := range steps[:len(steps)-1] {
					got := make(chan bool, 1)
					go func() {
						for {
							line, err := br.ReadString('\n')
							if err != nil {
								got <- false
								return
							}
							if strings.Contains(line, s.want) {
								got <- true
								return
							}
						}
					}()
					select {
					case ok := <-got:
						if !ok {
							t.Fatalf("stream ended before %q reached the client", s.want)
						}
					case <-time.After(3 * time.Second):
						t.Fatalf("%q did not reach the client while the next event was incomplete or carried no data: the gateway held it back", s.want)
					}
					seen <- struct{}{}
				}
			})
		}
	}
}

// TestStreamHeadersBeforeALateFirstEvent: a stream's headers reach the
// client on their own when the engine's first event is late (a long
// prefill), well before that event; the event follows.
func TestStreamHeadersBeforeALateFirstEvent(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	release := make(chan struct{})
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"late"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
	}
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"coder","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the test closes it once received
		got <- answer{resp, err}
	}()
	var resp *http.Response
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatal(a.err)
		}
		resp = a.resp
	case <-time.After(3 * time.Second):
		close(release)
		t.Fatal("no headers while the first event was late")
	}
	defer resp.Body.Close()
	close(release)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(rest), "late") || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("stream %q (%v), want the late event and [DONE]", rest, err)
	}
}

// TestBoundWithARepeatedChoice: an engine that names one choice several
// times in a chunk is still held to the bound: every token it relayed is
// counted (the cut's usage is exact), and at most one chunk past the bound
// reaches the client before the stream is cut.
func TestBoundWithARepeatedChoice(t *testing.T) {
	var sb strings.Builder
	for range 5 {
		sb.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"}},{"index":0,"delta":{"content":"b"}},{"index":0,"delta":{"content":"c"}}]}` + "\n\n")
	}
	sb.WriteString("data: [DONE]\n\n")
	g := &Gateway{log: slog.New(slog.DiscardHandler)}
	x := &exchange{start: time.Now()}
	x.bound.perChoice = 3
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(sb.String()))}
	w := httptest.NewRecorder()
	g.relayStream(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil), x, resp, nil)
	relayed := bytes.Count(w.Body.Bytes(), []byte(`"content":"`))
	if !x.bound.cut {
		t.Fatalf("stream not cut; client got %q", w.Body.String())
	}
	if relayed > 6 {
		t.Errorf("%d pieces relayed for a bound of 3: more than one chunk past it", relayed)
	}
	if got := x.bound.relayed(); got != relayed {
		t.Errorf("bound counted %d tokens, client got %d", got, relayed)
	}
}
