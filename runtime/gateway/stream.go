package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// relayStream relays a server-sent-event response event by event and reads
// the usage from the chunk that carries it. It flushes whenever it has
// nothing more from the engine in hand, so an event is never held back, and
// events that arrived together leave together. When the
// gateway itself asked for usage (x.injected), the usage-only chunk is
// dropped so the client sees the stream it asked for.
//
// A stream the engine breaks off (its connection reset or cut mid-chunk, or
// nothing from it for StreamIdleTimeout) ends with an error event in
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
	if err := rc.Flush(); err != nil {
		return
	}

	br := bufio.NewReaderSize(resp.Body, 16<<10)
	event := make([]byte, 0, 1024)
	for {
		lineStart := len(event)
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			idle.kick()
			event = append(event, chunk...)
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
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
				if errors.Is(context.Cause(resp.Request.Context()), errStreamIdle) {
					why = fmt.Sprintf("the model's replica sent nothing for %s; the answer is incomplete, retry the request", g.cfg.StreamIdleTimeout)
				}
				g.log.Warn("upstream stream broken", "replica", x.rec.ReplicaID, "model", x.rec.Model, "err", err)
				x.rec.Status = http.StatusBadGateway
				g.streamError(w, rc, why)
			}
			return
		}
		line := event[lineStart:]
		if len(bytes.TrimRight(line, "\r\n")) > 0 {
			continue
		}
		if !g.emit(w, rc, x, event, br.Buffered() == 0) {
			// The client went away; returning cancels the upstream.
			x.rec.Status = statusClientGone
			return
		}
		event = event[:0]
	}
}

// streamError ends a stream with an error event in OpenAI's shape.
func (g *Gateway) streamError(w http.ResponseWriter, rc *http.ResponseController, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": typeUpstream, "code": "upstream_error", "param": nil,
	}})
	_, _ = w.Write([]byte("data: "))
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n\n"))
	_ = rc.Flush()
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
	if x.rec.TTFT == 0 {
		x.rec.TTFT = time.Since(x.start)
	}
	if _, err := w.Write(event); err != nil {
		return false
	}
	content := contentEvent(event)
	if content {
		x.events++
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
		var c struct {
			Choices []struct{} `json:"choices"`
			Usage   *usageJSON `json:"usage"`
		}
		if json.Unmarshal(data, &c) != nil || c.Usage == nil {
			continue
		}
		return c.Usage, len(c.Choices) == 0
	}
	return nil, false
}
