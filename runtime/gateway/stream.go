package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
)

// relayStream relays a server-sent-event response event by event and reads
// the usage from the chunk that carries it. It flushes the first event at
// once and after that whenever it has no whole event from the engine in
// hand, so an event is never held back, and events that arrived together
// leave together. When the
// gateway itself asked for usage (x.injected), the usage-only chunk is
// dropped so the client sees the stream it asked for.
//
// A stream the engine breaks off (its connection reset or cut mid-chunk,
// nothing from it for StreamIdleTimeout, or an event longer than
// maxEventBytes) ends with an error event in
// OpenAI's shape, data: {"error": {...}}, and no [DONE], so that a client
// sees the answer failed rather than waiting or taking it as whole.
func (g *Gateway) relayStream(w http.ResponseWriter, r *http.Request, x *exchange, resp *http.Response, idle *idleWatch) {
	copyResponseHeaders(w.Header(), resp.Header)
	x.rec.Status = resp.StatusCode
	rc := http.NewResponseController(w)
	// A stream lasts as long as the generation; the server's write timeout
	// must not cut it (GenerationTimeout bounds it instead).
	_ = rc.SetWriteDeadline(time.Time{})
	w.WriteHeader(resp.StatusCode)
	// The headers leave with the first event, in one write, unless the
	// engine takes longer than streamHeadersAfter to send it (a long
	// prefill, a queue): then they leave on their own, so the client
	// knows its request was taken.
	hw := &headerWait{rc: rc}
	hw.t = time.AfterFunc(streamHeadersAfter, hw.fire)
	defer hw.stop()

	// One buffer holds the event being read and what came after it:
	// an event is a few hundred bytes and the transport buffers beneath.
	er := newEventReader(resp.Body, idle)
	defer er.release()
	// The first event leaves at once (it is the time to first token);
	// later ones that arrived together leave together.
	first := true
	for {
		event, err := er.next()
		hw.stop()
		if first {
			x.inHand = time.Now()
		}
		if err != nil {
			// End of stream: pass on what is left. A broken stream's last
			// event is cut short and is not passed on.
			if len(event) > 0 && (errors.Is(err, io.EOF) || r.Context().Err() != nil) {
				g.emit(w, rc, x, event, true)
			}
			// A client that read the whole answer and hung up before the
			// engine closed its stream did not leave early.
			switch {
			case r.Context().Err() != nil && !x.done:
				x.rec.Status = statusClientGone
			case !errors.Is(err, io.EOF) && !x.done:
				why := "the model's replica failed mid-stream; the answer is incomplete, retry the request"
				if idle != nil && idle.fired.Load() {
					why = fmt.Sprintf("the model's replica sent nothing for %s; the answer is incomplete, retry the request", g.cfg.StreamIdleTimeout)
				}
				if errors.Is(err, errEventTooLarge) {
					why = fmt.Sprintf("the model's replica sent an event longer than %d MiB; the answer is incomplete", maxEventBytes>>20)
				}
				g.log.Warn("upstream stream broken", "replica", x.rec.ReplicaID, "model", x.rec.Model, "err", err)
				x.rec.Status = http.StatusBadGateway
				g.streamError(w, rc, why)
			}
			return
		}
		sent := g.emit(w, rc, x, event, first || !er.eventInHand())
		if first && sent {
			x.firstByte()
		}
		if !sent {
			// The client went away, or the stream reached its bound and
			// was ended; returning cancels the upstream.
			if !x.bound.cut {
				x.rec.Status = statusClientGone
			}
			return
		}
		first = false
	}
}

// streamHeadersAfter is how long a stream's headers wait for its first
// event to leave with it.
const streamHeadersAfter = 50 * time.Millisecond

// headerWait sends a stream's headers on their own when its first event is
// late: fire flushes them unless stop came first. stop waits for a flush
// in progress, so nothing else writes to the client meanwhile.
type headerWait struct {
	rc      *http.ResponseController
	t       *time.Timer
	mu      sync.Mutex
	stopped bool
}

func (h *headerWait) fire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		_ = h.rc.Flush()
	}
}

func (h *headerWait) stop() {
	if h.t == nil {
		return
	}
	h.t.Stop()
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.t = nil
}

// eventReader reads a server-sent-event stream event by event: an event
// is its lines up to and including the first blank one. What it read and
// did not hand out yet stays in the same buffer as the event, so a stream
// holds one buffer, not a reader's and an event's: with 1,000 streams open
// each byte of it is a kilobyte of the control plane's memory.
type eventReader struct {
	src  io.Reader
	idle *idleWatch
	buf  []byte // what was read; buf[start:] is not handed out yet
	// start is where the next event begins, line where the line being
	// looked at begins, scan how far that line was looked at.
	start, line, scan int
	err               error // the read's error, once buf holds all there is
}

// eventBufSize is an event reader's buffer at first: an event of vLLM,
// SGLang, llama.cpp or the sim engine is a few hundred bytes, and the
// buffer is the connection's reader's size, so that one read takes all
// the events that arrived together and they leave in one write (with
// 1 KiB, a burst of short answer's events took three reads and four
// writes to the client: 1.20–1.25× the bare proxy's time to first byte
// in BenchmarkGatewayAgainstBareProxy/stream, against 1.12–1.17×). A
// longer event grows it.
const eventBufSize = 4 << 10

// maxEventBytes is the largest event read: an engine whose event runs
// past it (no blank line, or one endless data: line) would otherwise have
// the gateway hold all it sends. Its stream ends as a broken one
// (errEventTooLarge) and its connection is closed. A chat chunk is a few
// hundred bytes; a whole answer in one event is far below this.
const maxEventBytes = 16 << 20

// errEventTooLarge is what next returns for an event past maxEventBytes.
var errEventTooLarge = fmt.Errorf("the engine sent an event longer than %d MiB", maxEventBytes>>20)

// maxPooledEvent is the largest buffer kept for another stream.
const maxPooledEvent = 64 << 10

var eventBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, eventBufSize)
	return &b
}}

func newEventReader(src io.Reader, idle *idleWatch) *eventReader {
	return &eventReader{src: src, idle: idle, buf: (*eventBufs.Get().(*[]byte))[:0]}
}

// release gives the buffer back for another stream; the reader is not
// used after.
func (er *eventReader) release() {
	if cap(er.buf) <= maxPooledEvent {
		b := er.buf[:0]
		eventBufs.Put(&b)
	}
	er.buf = nil
}

// next returns the next event, which is valid until the following call.
// At the end of the stream or a failed read it returns what is left (an
// event cut short, or nothing) with the error; an event longer than
// maxEventBytes is dropped and ends the stream with errEventTooLarge.
func (er *eventReader) next() ([]byte, error) {
	if er.start == len(er.buf) {
		er.buf = er.buf[:0]
		er.start, er.line, er.scan = 0, 0, 0
	}
	empty := 0
	for {
		for {
			i := bytes.IndexByte(er.buf[er.scan:], '\n')
			if i < 0 {
				er.scan = len(er.buf)
				break
			}
			end := er.scan + i + 1
			blank := len(bytes.TrimRight(er.buf[er.line:end], "\r\n")) == 0
			er.line, er.scan = end, end
			if blank {
				event := er.buf[er.start:end]
				er.start = end
				return event, nil
			}
		}
		if er.err != nil {
			event := er.buf[er.start:]
			er.start = len(er.buf)
			er.line, er.scan = er.start, er.start
			return event, er.err
		}
		if er.start > 0 { // the events before were handed out: room for more
			n := copy(er.buf, er.buf[er.start:])
			er.buf = er.buf[:n]
			er.line -= er.start
			er.scan -= er.start
			er.start = 0
		}
		if len(er.buf) >= maxEventBytes { // buf[0:] is one event, not ended
			er.buf = er.buf[:0]
			er.start, er.line, er.scan = 0, 0, 0
			er.err = errEventTooLarge
			return nil, er.err
		}
		if len(er.buf) == cap(er.buf) {
			// Doubled, up to the bound exactly.
			er.buf = append(make([]byte, 0, min(max(2*cap(er.buf), eventBufSize), maxEventBytes)), er.buf...)
		}
		n, err := er.src.Read(er.buf[len(er.buf):cap(er.buf)])
		er.idle.kick()
		er.buf = er.buf[:len(er.buf)+n]
		er.err = err
		if n == 0 && err == nil {
			if empty++; empty >= 100 {
				er.err = io.ErrNoProgress
			}
		}
	}
}

// eventInHand reports whether a whole next event was read already, which
// can leave with the one before it. An event is never held back waiting
// for bytes that have not arrived.
func (er *eventReader) eventInHand() bool {
	return eventIn(er.buf[er.start:])
}

// eventIn reports whether b holds the end of an event.
func eventIn(b []byte) bool {
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// streamError ends a stream with an error event in OpenAI's shape.
func (g *Gateway) streamError(w http.ResponseWriter, rc *http.ResponseController, msg string) {
	_, _ = w.Write(chatErrorEvent(typeUpstream, "upstream_error", msg))
	_ = rc.Flush()
}

// chatErrorEvent is an error event of a chat stream, in OpenAI's shape.
func chatErrorEvent(typ, code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "code": code, "param": nil,
	}})
	return append(append([]byte("data: "), b...), "\n\n"...)
}

// emit sends one event to the client unless it is the injected usage chunk,
// flushing when asked. It reports whether the client is still there.
func (g *Gateway) emit(w http.ResponseWriter, rc *http.ResponseController, x *exchange, event []byte, flush bool) bool {
	if u, usageOnly := eventUsage(event); u != nil {
		x.usage = u.usage()
		if x.injected && usageOnly {
			if flush {
				return rc.Flush() == nil
			}
			return true
		}
	}
	content := contentEvent(event)
	// An event from an engine that names each choice once adds at most one
	// token to each, so no choice holds more tokens than events were
	// relayed: while that count is below the bound, the event cannot pass
	// it, so it leaves first and is counted after (the count is off the
	// token's way to the client). An engine that names a choice twice in a
	// chunk is caught by that count (over), and from then on every event is
	// checked before it leaves.
	bounded := content && x.bound.perChoice > 0
	countAfter := bounded && !x.bound.over && x.events < x.bound.perChoice
	if bounded && !countAfter && x.bound.exceeds(event) {
		g.cutStream(w, rc, x)
		return false
	}
	if x.rec.TTFT == 0 {
		x.rec.TTFT = time.Since(x.start)
	}
	if x.beforeDone != nil && !content && bytes.Contains(event, []byte("[DONE]")) {
		if extra := x.endAnswer(); len(extra) > 0 {
			if _, err := w.Write(extra); err != nil {
				return false
			}
		}
	}
	if _, err := w.Write(event); err != nil {
		return false
	}
	if content {
		x.events++
	}
	if countAfter && flush {
		if rc.Flush() != nil {
			return false
		}
		flush = false
	}
	if countAfter && x.bound.countPast(eventData(event)) {
		// Only an engine that names one choice twice in a chunk gets
		// here: its tokens are counted, and the bound is checked before
		// each event from now on, so the next token is cut.
		x.bound.over = true
		g.log.Warn("engine repeated a choice within one stream chunk", "model", x.rec.Model, "replica", x.rec.ReplicaID)
	}
	if pt, ok := x.shape.(passthrough); ok {
		pt.relayed(eventData(event))
	}
	if flush {
		if rc.Flush() != nil {
			return false
		}
	}
	if !content && bytes.Contains(event, []byte("[DONE]")) {
		x.done = true
	}
	return true
}

// contentEvent reports whether an event carries data other than the final
// [DONE] marker: with the engines llmgw runs, one generated token per event.
func contentEvent(event []byte) bool {
	for len(event) > 0 {
		line := event
		if i := bytes.IndexByte(event, '\n'); i >= 0 {
			line, event = event[:i], event[i+1:]
		} else {
			event = nil
		}
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			return len(data) > 0 && !bytes.Equal(data, []byte("[DONE]"))
		}
	}
	return false
}

// eventUsage returns the usage carried by an event's data, and whether the
// chunk carries nothing else (no choices).
func eventUsage(event []byte) (*usageJSON, bool) {
	for len(event) > 0 {
		line := event
		if i := bytes.IndexByte(event, '\n'); i >= 0 {
			line, event = event[:i], event[i+1:]
		} else {
			event = nil
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		i := bytes.Index(data, []byte(`"usage"`))
		if i < 0 || len(data) == 0 || data[0] != '{' {
			continue
		}
		if bytes.HasPrefix(data[skipColon(data, i+len(`"usage"`)):], []byte("null")) {
			continue // every chunk but the last says "usage":null
		}
		u, usageOnly, decided := walkChunkUsage(data)
		if !decided {
			u, usageOnly = decodeChunkUsage(data)
		}
		if u == nil {
			continue
		}
		return u, usageOnly
	}
	return nil, false
}

// decodeChunkUsage reads a chunk's usage, and whether it has no choices,
// with encoding/json; u is nil when the decoder refuses the chunk.
func decodeChunkUsage(data []byte) (u *usageJSON, usageOnly bool) {
	var c struct {
		Choices []struct{} `json:"choices"`
		Usage   *usageJSON `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return nil, false
	}
	return c.Usage, len(c.Choices) == 0
}

// walkChunkUsage is decodeChunkUsage by a walk of the bytes, for the
// chunks engines send: keys spelled as the decoder names them, each once
// at the top, values of the types it expects. decided is false for
// anything else, which decodeChunkUsage reads; FuzzChunkUsageAgrees holds
// the two to the same result.
func walkChunkUsage(data []byte) (u *usageJSON, usageOnly, decided bool) {
	if len(data) == 0 || data[0] != '{' || !validJSON(data) {
		return nil, false, false
	}
	var usage usageJSON
	hasUsage, choices, fail := false, 0, false // fail: the usage's own walk
	_, good := walkNamed(data, 0, usageKeys, func(bit, start int) (int, bool) {
		if bit == 0 { // choices: objects or nulls
			if data[start] != '[' {
				return 0, false
			}
			i := skipSpace(data, start+1)
			for data[i] != ']' {
				if data[i] != '{' && data[i] != 'n' {
					return 0, false
				}
				choices++
				if i = skipSpace(data, skipValue(data, i)); data[i] == ',' {
					i = skipSpace(data, i+1)
				}
			}
			return i + 1, true
		}
		if data[start] != '{' { // usage
			return 0, false
		}
		hasUsage = true
		return walkObject(data, start, func(key []byte, start int) (int, bool) {
			bit, name := keyBit(key, "prompt_tokens", "completion_tokens", "total_tokens")
			if bit < 0 {
				return 0, true
			}
			if name == "" {
				fail = true
				return 0, false
			}
			if data[start] == 'n' {
				return 0, true // null leaves the number as it is
			}
			end := skipValue(data, start)
			n, err := strconv.ParseInt(string(data[start:end]), 10, strconv.IntSize)
			if err != nil {
				fail = true
				return 0, false
			}
			switch bit { // a repeated key: the last wins, as in the decoder
			case 0:
				usage.PromptTokens = int(n)
			case 1:
				usage.CompletionTokens = int(n)
			default:
				usage.TotalTokens = int(n)
			}
			return end, true
		}), !fail
	})
	if !good {
		return nil, false, false
	}
	if !hasUsage {
		return nil, choices == 0, true
	}
	return &usage, choices == 0, true
}

// streamBound holds a stream to the completion tokens per choice that
// admission reserved. The engine was told that bound (max_tokens); one
// that generates past it anyway is cut off: the event that would pass
// the bound is not relayed, each choice still open gets a final chunk
// with finish_reason "length" (and the client its usage chunk, if it
// asked for one), the stream ends with [DONE] and the upstream request is
// cancelled. Tokens are counted one per event that carries generated
// text, reasoning or tool-call arguments, which is how vLLM, SGLang,
// llama.cpp and the sim engine stream; settlement caps the charge at the
// reservation in any case.
type streamBound struct {
	// perChoice is the bound; 0 leaves the stream unbounded.
	perChoice int
	// clientUsage is set when the client asked for the usage chunk.
	clientUsage bool
	// tokens counts the tokens relayed per choice index; finished holds
	// the choices whose finish_reason was relayed.
	tokens   map[int]int
	finished map[int]bool
	// id, object, created and model are the stream's, for the chunks the
	// gateway writes itself.
	id, object, model string
	created           int64
	// cut is set once the gateway ended the stream at the bound.
	cut bool
	// over is set when an event counted after it was relayed put a
	// choice past the bound (an engine naming a choice twice in a chunk).
	over bool
	// shape reads the stream's token chunks without a walk.
	shape chunkShape
}

// streamChunk is what the bound reads of a chat.completion.chunk or a
// streamed text_completion.
type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
}

type streamChoice struct {
	Index int     `json:"index"`
	Text  *string `json:"text"`
	Delta *struct {
		Content          *string           `json:"content"`
		ReasoningContent *string           `json:"reasoning_content"`
		Reasoning        *string           `json:"reasoning"`
		ToolCalls        []json.RawMessage `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// carries reports whether a streamed choice holds a generated token.
func (ch *streamChoice) carries() bool {
	nonEmpty := func(s *string) bool { return s != nil && *s != "" }
	if nonEmpty(ch.Text) {
		return true
	}
	d := ch.Delta
	return d != nil && (nonEmpty(d.Content) || nonEmpty(d.ReasoningContent) || nonEmpty(d.Reasoning) || len(d.ToolCalls) > 0)
}

// exceeds counts the tokens an event carries and reports whether relaying
// it would pass the bound for one of its choices; an event that does not
// pass it is counted.
func (b *streamBound) exceeds(event []byte) bool { return b.exceedsData(eventData(event)) }

// exceedsData is exceeds for an event's data. The chunk is walked
// (walkChunk), and decoded only when the walk cannot decide it.
func (b *streamBound) exceedsData(data []byte) bool { return b.read(data, false) }

// countPast counts an event already relayed, every token it carries, and
// reports whether a choice now holds more than the bound.
func (b *streamBound) countPast(data []byte) bool { return b.read(data, true) }

// read reads a chunk's choices; unless relayed, one that would pass the
// bound is reported and nothing counted; otherwise the chunk's tokens
// are counted and read reports whether a choice is past the bound.
func (b *streamBound) read(data []byte, relayed bool) bool {
	var buf [4]chunkChoice
	var choices []chunkChoice
	if ch, ok := b.shape.match(data); ok {
		choices = append(buf[:0], ch)
	} else {
		var h chunkHead
		var decided bool
		var spans carrierSpans
		h, choices, ok, decided, spans = walkChunkSpans(data, buf[:0], b.id == "")
		if !decided {
			if len(data) == 0 || data[0] != '{' {
				return false
			}
			h, choices, ok = decodeChunk(data, buf[:0])
		} else if ok {
			b.shape.learn(data, choices, spans)
		}
		if !ok {
			return false
		}
		// The head is read from walked chunks only: one read by the
		// shape has none (h is empty), and an engine that sends no id
		// would have the head read again on every chunk.
		if b.id == "" {
			b.id, b.object, b.created, b.model = h.id, h.object, h.created, h.model
		}
	}
	if b.tokens == nil {
		b.tokens, b.finished = map[int]int{}, map[int]bool{}
	}
	if !relayed {
		for i, ch := range choices {
			if !ch.carries {
				continue
			}
			// The tokens this chunk adds to the choice: one per entry
			// naming it.
			n := 0
			for _, other := range choices[i:] {
				if other.carries && other.index == ch.index {
					n++
				}
			}
			if b.tokens[ch.index]+n > b.perChoice {
				return true
			}
		}
	}
	past := false
	for _, ch := range choices {
		if ch.carries {
			b.tokens[ch.index]++
			past = past || b.tokens[ch.index] > b.perChoice
		} else if _, seen := b.tokens[ch.index]; !seen {
			b.tokens[ch.index] = 0
		}
		if ch.finished {
			b.finished[ch.index] = true
		}
	}
	return relayed && past
}

// relayed is the completion tokens relayed, all choices together.
func (b *streamBound) relayed() int {
	n := 0
	for _, t := range b.tokens {
		n += t
	}
	return n
}

// eventData returns the data of an event's first data line.
func eventData(event []byte) []byte {
	for len(event) > 0 {
		line := event
		if i := bytes.IndexByte(event, '\n'); i >= 0 {
			line, event = event[:i], event[i+1:]
		} else {
			event = nil
		}
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimSpace(data)
		}
	}
	return nil
}

// cutStream ends a stream that reached its bound: a final chunk with
// finish_reason "length" for each choice still open, the usage chunk when
// the client asked for it, and [DONE]. The request is settled here, on
// the tokens relayed and a typical prompt count, so that the usage chunk says
// what was charged.
func (g *Gateway) cutStream(w http.ResponseWriter, rc *http.ResponseController, x *exchange) {
	b := &x.bound
	b.cut = true
	x.usage = request.Usage{PromptTokens: x.promptTypical, CompletionTokens: b.relayed(), Estimated: true}
	x.usage.TotalTokens = x.usage.PromptTokens + x.usage.CompletionTokens
	x.settle()
	g.log.Warn("stream cut at its reserved completion tokens", "model", x.rec.Model, "replica", x.rec.ReplicaID,
		"max_tokens", b.perChoice, "completion_tokens", b.relayed())
	object := b.object
	if object == "" {
		object = "chat.completion.chunk"
	}
	head := func() map[string]any {
		return map[string]any{"id": b.id, "object": object, "created": b.created, "model": b.model}
	}
	var out bytes.Buffer
	write := func(v any) {
		data, _ := json.Marshal(v) // maps of strings, numbers and slices always encode
		fmt.Fprintf(&out, "data: %s\n\n", data)
	}
	open := make([]int, 0, len(b.tokens))
	for i := range b.tokens {
		if !b.finished[i] {
			open = append(open, i)
		}
	}
	slices.Sort(open)
	for _, i := range open {
		choice := map[string]any{"index": i, "logprobs": nil, "finish_reason": "length"}
		if object == "text_completion" {
			choice["text"] = ""
		} else {
			choice["delta"] = map[string]any{}
		}
		c := head()
		c["choices"] = []any{choice}
		write(c)
	}
	if b.clientUsage {
		u := x.usage
		c := head()
		c["choices"] = []any{}
		c["usage"] = map[string]int{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.PromptTokens + u.CompletionTokens}
		write(c)
	}
	out.Write(x.endAnswer())
	out.WriteString("data: [DONE]\n\n")
	if _, err := w.Write(out.Bytes()); err == nil && rc.Flush() == nil {
		x.done = true
	}
}
