package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/runtime/apishape"
)

// serveMessages is Anthropic's Messages API (/v1/messages), translated
// onto the engine's chat completions. The key may come as x-api-key, as
// Anthropic's clients send it, or as a bearer token.
func (g *Gateway) serveMessages(w http.ResponseWriter, r *http.Request, x *exchange) {
	if r.Header.Get("Authorization") == "" {
		if k := strings.TrimSpace(r.Header.Get("X-Api-Key")); k != "" {
			r.Header.Set("Authorization", "Bearer "+k)
		}
	}
	x.shape = &messagesShape{}
	onThread(r, x)
	g.serve(w, r, x)
}

// serveMessagesUnknown answers a path under /v1/messages/ the gateway
// does not serve (count_tokens, batches) in Anthropic's error shape, as
// the Anthropic clients that call it expect.
func (g *Gateway) serveMessagesUnknown(w http.ResponseWriter, r *http.Request) {
	g.closeUnread(w, r)
	body := append(apishape.AnthropicError(http.StatusNotFound,
		fmt.Sprintf("unknown URL: %s %s (this gateway serves POST /v1/messages only)", r.Method, r.URL.Path),
		w.Header().Get(requestIDHeader)), '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write(body)
}

// messagesShape is one /v1/messages request.
type messagesShape struct {
	req *apishape.MessagesRequest
	id  string
}

func (s *messagesShape) toChat(_ context.Context, _ *Gateway, _ *exchange, body []byte) ([]byte, *apiError) {
	req, e := apishape.ParseMessages(body)
	if e != nil {
		return nil, fromShapeError(e)
	}
	chat, e := req.ToChat()
	if e != nil {
		return nil, fromShapeError(e)
	}
	s.req, s.id = req, newID("msg_")
	return chat, nil
}

// writeError sends e in Anthropic's shape: {"type":"error","error":{"type",
// "message"},"request_id"}.
func (s *messagesShape) writeError(w http.ResponseWriter, x *exchange, e *apiError) {
	msg := e.Message
	if e.status == http.StatusUnauthorized && strings.HasPrefix(msg, "missing API key") {
		msg = "missing API key: send it as x-api-key: <key> or Authorization: Bearer <key>"
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((e.retryAfter+time.Second-1)/time.Second), 10))
	}
	body := append(apishape.AnthropicError(e.status, msg, x.rec.RequestID), '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}

func (s *messagesShape) setHeaders(http.Header) {}

func (s *messagesShape) model() string { return s.req.Model }

func (s *messagesShape) whole(_ *exchange, res *apishape.Result, _ []byte) []byte {
	return apishape.MessageFromResult(res, s.id, s.model(), s.req.StopSequences)
}

func (s *messagesShape) stream(*exchange) shapeStream {
	return messagesStream{apishape.NewMessagesStream(s.id, s.model(), s.req.StopSequences)}
}

func (s *messagesShape) completed(context.Context, *Gateway, *exchange, *apishape.Result) {}

type messagesStream struct{ *apishape.MessagesStream }

func (m messagesStream) chunk(data []byte) ([]apishape.Event, bool, error) { return m.Chunk(data) }

func (m messagesStream) finish() []apishape.Event { return m.Finish() }

func (m messagesStream) broken(message string) []apishape.Event {
	return []apishape.Event{apishape.ErrorEvent(http.StatusBadGateway, message)}
}

func (m messagesStream) result() *apishape.Result { return m.Result() }
func (m messagesStream) ended() bool              { return m.Done() }
