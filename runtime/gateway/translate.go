package gateway

// Client APIs the gateway translates onto the engine's chat completions:
// the request takes the same path as every other (serve), with a shape
// that turns the client's body into a chat completions body before it is
// parsed and admitted, and turns the engine's answer back. The
// translation itself is package apishape's; this file does the I/O.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/runtime/apishape"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

// shape is a client API put onto the engine's chat completions, made
// anew for each request: a translated one (translator) or a chat
// completion with more in it (passthrough: threads).
type shape interface {
	// toChat turns the client's body into a chat completions body.
	toChat(ctx context.Context, g *Gateway, x *exchange, body []byte) ([]byte, *apiError)
	// writeError sends e in the client API's error shape.
	writeError(w http.ResponseWriter, x *exchange, e *apiError)
	// setHeaders adds the shape's response headers.
	setHeaders(h http.Header)
	// completed is called once the engine's answer is whole, before its
	// end (the non-streamed body, a stream's last events) is sent.
	completed(ctx context.Context, g *Gateway, x *exchange, res *apishape.Result)
}

// translator is a shape whose answer is in another API's shape:
// relayShaped turns the engine's answer into it.
type translator interface {
	shape
	// whole renders a complete answer; raw is the engine's body.
	whole(x *exchange, res *apishape.Result, raw []byte) []byte
	// stream starts the translation of a streamed answer.
	stream(x *exchange) shapeStream
}

// passthrough is a shape whose answer is the engine's own, relayed as
// any chat completion is (relayStream, relayBody: errors, headers, the
// stream's bound and its cut included); it reads the answer as it
// reaches the client.
type passthrough interface {
	shape
	// relayed reads the data of one event of a streamed answer, once it
	// was sent to the client.
	relayed(data []byte)
	// answer is the streamed answer read so far.
	answer() *apishape.Result
}

// shapeStream translates one streamed answer.
type shapeStream interface {
	// chunk translates one data payload of the engine's stream; content
	// reports whether it carried generated output.
	chunk(data []byte) (events []apishape.Event, content bool, err error)
	// finish ends a stream the engine completed.
	finish() []apishape.Event
	// broken ends a stream the engine broke off.
	broken(message string) []apishape.Event
	result() *apishape.Result
	// ended reports whether the engine's [DONE] arrived.
	ended() bool
}

func fromShapeError(e *apishape.Error) *apiError {
	ae := newError(e.Status, typeInvalidRequest, e.Code, e.Message)
	if e.Param != "" {
		ae = ae.withParam(e.Param)
	}
	return ae
}

// newID names what a client may ask for again (a stored response, a
// note): 128 bits from crypto/rand, so one cannot be guessed from another.
func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func usageOf(u *apishape.Usage) request.Usage {
	if u == nil {
		return request.Usage{}
	}
	return request.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens, Reported: true}
}

// engineError turns an engine's error answer into the gateway's, keeping
// its status and message.
func engineError(status int, body []byte) *apiError {
	var v struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &v)
	msg := v.Error.Message
	if msg == "" {
		msg = v.Message
	}
	if msg == "" {
		msg = strings.TrimSpace(truncate(body, 200))
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	typ := typeInvalidRequest
	if status >= 500 {
		typ = typeUpstream
	}
	return newError(status, typ, "", "the model's engine refused the request: "+msg)
}

// relayShaped relays the engine's answer translated by ts (x.shape). A
// stream is ended with the shape's broken-stream event when idle fires.
func (g *Gateway) relayShaped(w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, resp *http.Response, ts translator, idle *idleWatch) {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxBufferedResponse))
		if err != nil {
			g.upstreamFailed(w, r, x, ep, err)
			return
		}
		x.inHand = time.Now()
		if resp.StatusCode != http.StatusOK {
			x.fail(w, engineError(resp.StatusCode, data))
			return
		}
		res, err := apishape.ParseChatCompletion(data)
		if err != nil {
			g.log.Warn("translating engine answer", "replica", ep.ReplicaID, "model", x.rec.Model, "err", err)
			x.fail(w, newError(http.StatusBadGateway, typeUpstream, "upstream_error", "the model's engine sent an answer that could not be read"))
			return
		}
		x.usage = usageOf(res.Usage)
		out := ts.whole(x, res, data)
		// Kept before it is sent, so that the answer can say when a
		// thread's turn was not (x-llmgw-thread-unsaved).
		ts.completed(r.Context(), g, x, res)
		ts.setHeaders(w.Header())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		x.rec.Status = http.StatusOK
		w.WriteHeader(http.StatusOK)
		// Sent now, not when the handler returns: settling and records
		// come after the client has its answer.
		if _, err := w.Write(out); err == nil && http.NewResponseController(w).Flush() == nil {
			x.firstByte()
		}
		return
	}

	x.inHand = time.Now() // what the client is sent first is the headers
	h := w.Header()
	ts.setHeaders(h)
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.rec.Status = http.StatusOK
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		x.rec.Status = statusClientGone
		return
	}
	x.firstByte()
	st := ts.stream(x)
	// pending is set while events were written and not flushed.
	pending := false
	send := func(evs []apishape.Event, flush bool) bool {
		for _, e := range evs {
			if _, err := w.Write(e.Bytes()); err != nil {
				return false
			}
			pending = true
		}
		if !flush || !pending {
			return true
		}
		pending = false
		return rc.Flush() == nil
	}
	// Read event by event in one pooled buffer (stream.go, eventReader).
	er := newEventReader(resp.Body, idle)
	defer er.release()
	var data []byte
	var streamErr error // what ended the engine's stream
	first := true
	for {
		event, err := er.next()
		for len(event) > 0 {
			line := event
			if i := bytes.IndexByte(event, '\n'); i >= 0 {
				line, event = event[:i+1], event[i+1:]
			} else {
				event = nil
			}
			if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:")); ok {
				data = append(data, bytes.TrimSpace(d)...)
			}
		}
		if len(data) > 0 {
			if x.bound.perChoice > 0 && st.result().Finish == "" && x.bound.exceedsData(data) {
				// Past what admission reserved (an engine that ignored
				// max_tokens): this chunk is neither translated nor
				// relayed, and the answer ends, cut at the bound.
				x.bound.cut = true
				st.result().Finish = "length"
				x.usage = request.Usage{PromptTokens: x.promptEstimate, CompletionTokens: x.bound.relayed(), Estimated: true}
				x.usage.TotalTokens = x.usage.PromptTokens + x.usage.CompletionTokens
				g.log.Warn("stream cut at its reserved completion tokens", "model", x.rec.Model, "replica", x.rec.ReplicaID,
					"max_tokens", x.bound.perChoice, "completion_tokens", x.bound.relayed())
				break
			}
			evs, content, cerr := st.chunk(data)
			data = data[:0]
			if cerr != nil {
				g.log.Warn("translating engine stream", "replica", ep.ReplicaID, "model", x.rec.Model, "err", cerr)
				send(st.broken("the model's engine sent a stream that could not be read"), true)
				return
			}
			if content {
				x.events++
				if x.rec.TTFT == 0 {
					x.rec.TTFT = time.Since(x.start)
				}
			}
			if u := st.result().Usage; u != nil {
				x.usage = usageOf(u)
			}
			// The first events leave at once (time to first token), later
			// ones when no whole event is in hand.
			if !send(evs, first || !er.eventInHand()) {
				x.rec.Status = statusClientGone
				return
			}
			first = false
		} else if pending && !er.eventInHand() {
			// An event without data (a comment, a keep-alive) ended and
			// nothing whole follows it: what was written leaves now.
			if !send(nil, true) {
				x.rec.Status = statusClientGone
				return
			}
		}
		if err != nil {
			streamErr = err
			break
		}
	}
	if r.Context().Err() != nil {
		x.rec.Status = statusClientGone
		return
	}
	res := st.result()
	if res.Finish == "" && !st.ended() {
		why := "the model's engine ended the stream before the answer was complete"
		if idle != nil && idle.fired.Load() {
			why = "the model's replica sent nothing for " + g.cfg.StreamIdleTimeout.String() + "; the answer is incomplete, retry the request"
		}
		if errors.Is(streamErr, errEventTooLarge) {
			why = fmt.Sprintf("the model's replica sent an event longer than %d MiB; the answer is incomplete", maxEventBytes>>20)
		}
		x.rec.Status = http.StatusBadGateway
		send(st.broken(why), true)
		return
	}
	// Kept once whole, before its last events are sent, so that the
	// stream can say when a thread's turn was not.
	last := st.finish()
	// What the client is owed leaves before the store write (a flush
	// with nothing pending still fails on a connection a write failed
	// on); a client found gone then did not get the answer whole, which
	// is not kept.
	pending = false
	if rc.Flush() != nil || r.Context().Err() != nil {
		x.rec.Status = statusClientGone
		return
	}
	ts.completed(r.Context(), g, x, res)
	if us, ok := ts.(interface{ unsavedWhy() string }); ok && us.unsavedWhy() != "" {
		// A comment line, which SDKs skip: the answer is whole all the same.
		if _, err := w.Write(threadUnsavedComment(us.unsavedWhy())); err != nil {
			return
		}
	}
	if send(last, true) {
		x.done = true
	}
}
