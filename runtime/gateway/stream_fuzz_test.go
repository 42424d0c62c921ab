package gateway

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"testing/iotest"
	"time"
)

// sseEvents splits an event stream the way the relay frames it: an event
// ends with a line that is empty once its line ending is trimmed; what
// follows the last such line is one more event.
func sseEvents(data []byte) [][]byte {
	var events [][]byte
	start := 0
	for i := 0; i < len(data); {
		j := bytes.IndexByte(data[i:], '\n')
		if j < 0 {
			break
		}
		line := data[i : i+j+1]
		i += j + 1
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			events = append(events, data[start:i])
			start = i
		}
	}
	if start < len(data) {
		events = append(events, data[start:])
	}
	return events
}

// FuzzRelayStream feeds the SSE relay whatever an engine might send and
// checks that the client gets it byte for byte when the gateway asked for
// nothing (injected false), and with exactly the usage-only events taken
// out when the gateway asked the engine for usage itself (injected true);
// and that the usage read is the last usage event's.
func FuzzRelayStream(f *testing.F) {
	for _, seed := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"delta\":{}}]}\r\n\r\n: keep-alive\n\nevent: x\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n",
		"data: {\"usage\": {\"completion_tokens\": 2}, \"choices\": []}\n\ndata: [DONE]",
		"data:{\"choices\":[],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":1e309}}\n\n",
		"\n\n\n",
		"data: " + string(bytes.Repeat([]byte("x"), 40000)) + "\n\n",
		"",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, injected bool) {
		g := &Gateway{log: slog.New(slog.DiscardHandler)}
		x := &exchange{start: time.Now(), injected: injected}
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(bytes.NewReader(data))}
		w := httptest.NewRecorder()
		g.relayStream(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil), x, resp, nil)
		// The same bytes arriving a byte at a time are relayed the same.
		x1 := &exchange{start: time.Now(), injected: injected}
		resp1 := &http.Response{StatusCode: http.StatusOK, Header: resp.Header, Body: io.NopCloser(iotest.OneByteReader(bytes.NewReader(data)))}
		w1 := httptest.NewRecorder()
		g.relayStream(w1, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil), x1, resp1, nil)
		if !bytes.Equal(w1.Body.Bytes(), w.Body.Bytes()) || x1.usage != x.usage {
			t.Fatalf("a byte at a time the client got\n%q (usage %+v)\nwhole\n%q (usage %+v)", w1.Body.Bytes(), x1.usage, w.Body.Bytes(), x.usage)
		}

		var want []byte
		var lastUsage *usageJSON
		for _, ev := range sseEvents(data) {
			u, usageOnly := eventUsage(ev)
			if u != nil {
				lastUsage = u
			}
			if injected && u != nil && usageOnly {
				continue
			}
			want = append(want, ev...)
		}
		if got := w.Body.Bytes(); !bytes.Equal(got, want) {
			t.Fatalf("the client got\n%q\nwant\n%q", got, want)
		}
		if lastUsage != nil && x.usage != lastUsage.usage() {
			t.Fatalf("usage %+v, want the last usage event's %+v", x.usage, lastUsage.usage())
		}
	})
}

// FuzzBodyUsage: the hand walk of a response body reads the usage that
// encoding/json reads.
func FuzzBodyUsage(f *testing.F) {
	for _, seed := range []string{
		`{"id":"c1","choices":[{"message":{"content":"\"usage\":{}"}}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`,
		`{"usage":{"prompt_tokens":1,"completion_tokens":2},"usage":{"prompt_tokens":5}}`,
		`{"usage":{"prompt_tokens":1},"usage":null}`,
		`{"usage":{"prompt_tokens":"1"}}`,
		`{"usage":{"prompt_tokens":1.5}}`,
		`{"USAGE":{"prompt_tokens":3}}`,
		`{"us\u0061ge":{"prompt_tokens":3}}`,
		"{\"u\u017fage\":{\"prompt_tokens\":3}}",
		`{"x":{"usage":{"prompt_tokens":9}}}`,
		`{"usage":[]}`,
		`[]`,
		`{}`,
		`{"usage":{}}{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := bodyUsage(body), decodeUsage(body); got != want {
			t.Fatalf("%q: walked %+v, decoded %+v", body, got, want)
		}
	})
}

// FuzzChunkAgrees: where the walk of a stream chunk decides, it reads
// what encoding/json reads.
func FuzzChunkAgrees(f *testing.F) {
	for _, seed := range []string{
		`{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"c1","choices":[{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":"stop"},{"index":0,"text":"x"}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[],"reasoning_content":"r","reasoning":null}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a"},"Index":2}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[]}`,
		`{"choices":[{"index":0,"delta":{"cont\u0065nt":"a"}}]}`,
		`{"choices":[{"index":1.0,"delta":{"content":"a"}}]}`,
		`{"choices":[{"index":"1","text":5}]}`,
		`{"choices":[null,{"index":2}]}`,
		`{"choices":{},"created":1e3}`,
		`{"id":5}`,
		`{"id":"\u00e9t\u00e9","model":"\"q\"","created":-0}`,
		`{"choices":[{"index":0,"finish_reason":""}]} `,
		`{"choices":[{"index":0,"text":null,"delta":null,"finish_reason":null}]}`,
		`{"choices":[]}{}`,
		`[]`,
		`{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, got, ok, decided := walkChunk(data, nil, true)
		if !decided {
			return
		}
		wh, want, wok := decodeChunk(data, nil)
		if ok != wok {
			t.Fatalf("%q: walk ok %v, decoder ok %v", data, ok, wok)
		}
		if !ok {
			return
		}
		if h != wh || !slices.Equal(got, want) {
			t.Fatalf("%q: walked %+v %+v, decoded %+v %+v", data, h, got, wh, want)
		}
	})
}

// TestWalkChunkDecides: the chunks engines send are read by the walk,
// not the decoder.
func TestWalkChunkDecides(t *testing.T) {
	for _, ev := range sseEvents([]byte(streamingBody())) {
		data := eventData(ev)
		if data[0] != '{' {
			continue
		}
		if _, _, ok, decided := walkChunk(data, nil, true); !ok || !decided {
			t.Errorf("%s: walk ok %v decided %v", data, ok, decided)
		}
	}
	data := []byte(`{"choices":[{"index":2,"delta":{"tool_calls":[{"index":0}]}},{"index":0,"text":"","finish_reason":"stop"}]}`)
	_, got, ok, decided := walkChunk(data, nil, false)
	want := []chunkChoice{{index: 2, carries: true}, {index: 0, finished: true}}
	if !ok || !decided || !slices.Equal(got, want) {
		t.Errorf("walked %+v (ok %v, decided %v), want %+v", got, ok, decided, want)
	}
}

// FuzzChunkUsageAgrees: where the walk of a stream chunk's usage decides,
// it reads what encoding/json reads (the usage, and whether the chunk has
// no choices).
func FuzzChunkUsageAgrees(f *testing.F) {
	for _, seed := range []string{
		`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":8,"total_tokens":13}}`,
		`{"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":2}}}`,
		`{"choices":null,"usage":{"prompt_tokens":1,"prompt_tokens":null,"total_tokens":-0}}`,
		`{"choices":[null,{}],"usage":null}`,
		`{"choices":[1],"usage":{"prompt_tokens":1}}`,
		`{"choices":{},"usage":{}}`,
		`{"usage":{"prompt_tokens":1.0}}`,
		`{"usage":{"Prompt_Tokens":1}}`,
		`{"usage":{"prompt_tokens":"1"}}`,
		`{"usage":{"prompt_tokens":99999999999999999999}}`,
		`{"usage":{},"usage":{"total_tokens":3}}`,
		`{"USAGE":{"total_tokens":3}}`,
		`{"usage":[]}`,
		`{"usage":{"total_tokens":3}} x`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, only, decided := walkChunkUsage(data)
		if !decided {
			return
		}
		wu, wonly := decodeChunkUsage(data)
		if (u == nil) != (wu == nil) || u != nil && (*u != *wu || only != wonly) {
			t.Fatalf("%q: walked %+v %v, decoded %+v %v", data, u, only, wu, wonly)
		}
	})
}

// FuzzChunkShapeAgrees: a chunk read by the shape learned from another
// chunk of its stream reads as the walk (or, where the walk cannot
// decide, the decoder) reads it.
func FuzzChunkShapeAgrees(f *testing.F) {
	token := `{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}`
	for _, seed := range []struct{ learned, token string }{
		{token, `" next"`},
		{token, `""`},
		{token, `"\u00e9\n"`},
		{token, `"a","content":"b"`},
		{token, `"a"}},{"index":0,"delta":{"content":"b"`},
		{token, `"a\"`},
		{token, `null`},
		{token, `"a" `},
		{`{"choices":[{"index":3,"text":"x","finish_reason":"stop"}]}`, `""`},
		{`{"choices":[{"index":0,"delta":{"reasoning":"r","content":null}}]}`, `"s"`},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[],"content":"a"}}]}`, `"b"`},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{}],"content":"a"}}]}`, `""`},
	} {
		f.Add([]byte(seed.learned), []byte(seed.token))
	}
	// The chunk read is the learned one's prefix and suffix around the
	// fuzzed bytes: the case the shape is for.
	f.Fuzz(func(t *testing.T, learned, token []byte) {
		_, choices, ok, decided, spans := walkChunkSpans(learned, nil, false)
		if !ok || !decided {
			return
		}
		var s chunkShape
		s.learn(learned, choices, spans)
		if len(s.prefix) == 0 {
			return
		}
		data := slices.Concat(s.prefix, token, s.suffix)
		got, matched := s.match(data)
		if !matched {
			return
		}
		_, want, ok, decided := walkChunk(data, nil, false)
		if !decided {
			_, want, ok = decodeChunk(data, nil)
		}
		if !ok || len(want) != 1 || want[0] != got {
			t.Fatalf("learned from %q, %q: shape read %+v, walk/decoder %+v (ok %v)", learned, data, got, want, ok)
		}
	})
}

// TestChunkShapeReadsTokenChunks: once a stream's token chunk was
// walked, the bound reads the others by their shape; a chunk of another
// shape (the finish chunk) is walked.
func TestChunkShapeReadsTokenChunks(t *testing.T) {
	b := streamBound{perChoice: 100}
	var tokens int
	for _, ev := range sseEvents([]byte(streamingBody())) {
		data := eventData(ev)
		if len(data) == 0 || data[0] != '{' {
			continue
		}
		_, shaped := b.shape.match(data)
		if tokens >= 1 && bytes.Contains(data, []byte(`" tok"`)) && !shaped {
			t.Errorf("token chunk %s not read by the shape learned", data)
		}
		if bytes.Contains(data, []byte(`"finish_reason":"length"`)) && shaped {
			t.Errorf("finish chunk %s read by a token chunk's shape", data)
		}
		if b.countPast(data) {
			t.Fatalf("past the bound at %s", data)
		}
		if bytes.Contains(data, []byte(`" tok"`)) {
			tokens++
		}
	}
	if tokens != 8 || b.relayed() != 8 {
		t.Errorf("%d token chunks, %d tokens counted; want 8 and 8", tokens, b.relayed())
	}
}

// TestChunkShapeKeepsHead: chunks read by their shape leave the head the
// walk read (an engine that sends no id included), which the chunks the
// gateway writes at the bound carry.
func TestChunkShapeKeepsHead(t *testing.T) {
	b := streamBound{perChoice: 100}
	for _, tok := range []string{"a", "b", "c"} {
		b.countPast([]byte(`{"object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"` + tok + `","finish_reason":null}]}`))
	}
	if b.object != "text_completion" || b.model != "m" || b.created != 7 {
		t.Errorf("head after three chunks: object %q model %q created %d; want text_completion, m, 7", b.object, b.model, b.created)
	}
	if _, shaped := b.shape.match([]byte(`{"object":"text_completion","created":7,"model":"m","choices":[{"index":0,"text":"d","finish_reason":null}]}`)); !shaped {
		t.Error("the chunks were not read by their shape")
	}
}
