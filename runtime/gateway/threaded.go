package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/llmgw/llmgw/runtime/apishape"
	"github.com/llmgw/llmgw/runtime/request"
)

// threaded is a translated API (Messages, Responses) on a thread: the
// client's body becomes a chat completions body (the translator), the
// thread's history goes before its messages (the thread), and the
// engine's answer goes back in the API's shape and into the thread.
// Errors are in the API's shape.
type threaded struct {
	translator
	thread *threadShape
}

// onThread makes x's shape continue the thread the request names, if it
// names one.
func onThread(r *http.Request, x *exchange) {
	if id := r.Header.Get(threadHeader); id != "" {
		x.shape = &threaded{translator: x.shape.(translator), thread: newThreadShape(r, id)}
	}
}

// conversationPrefixer is a translator that keeps the conversation it
// sent (a stored response): the thread's history it was sent after is
// put before it.
type conversationPrefixer interface {
	prefixConversation(history []json.RawMessage)
}

func (t *threaded) toChat(ctx context.Context, g *Gateway, x *exchange, body []byte) ([]byte, *apiError) {
	if _, ok := t.translator.(*responsesShape); ok {
		var prev struct {
			ID string `json:"previous_response_id"`
		}
		if json.Unmarshal(body, &prev) == nil && prev.ID != "" {
			return nil, newError(http.StatusBadRequest, typeInvalidRequest, "unsupported_value", fmt.Sprintf(
				"previous_response_id and x-llmgw-thread both continue a conversation; send one of them (thread %q holds this one)", t.thread.id)).
				withParam("previous_response_id")
		}
	}
	chat, aerr := t.translator.toChat(ctx, g, x, body)
	if aerr != nil {
		return nil, aerr
	}
	return t.thread.toChat(ctx, g, x, chat)
}

func (t *threaded) setHeaders(h http.Header) {
	t.translator.setHeaders(h)
	t.thread.setHeaders(h)
}

func (t *threaded) completed(ctx context.Context, g *Gateway, x *exchange, res *apishape.Result) {
	x.lease.Done() // the answer is whole: the replica is not held while it is stored
	if cp, ok := t.translator.(conversationPrefixer); ok {
		cp.prefixConversation(t.thread.kept)
	}
	t.translator.completed(ctx, g, x, res)
	t.thread.completed(ctx, g, x, res)
}

func (t *threaded) refit(ctx context.Context, g *Gateway, limits request.Limits, maxTokens int) ([]byte, *parsedBody, *apiError) {
	return t.thread.refit(ctx, g, limits, maxTokens)
}

func (t *threaded) unreadBytes() int { return t.thread.unread }

func (t *threaded) shrink(engineBody []byte, maxTokens int) ([]byte, *engineFit) {
	return t.thread.shrink(engineBody, maxTokens)
}

func (t *threaded) forReplica(fits *fitMemory, model, replica string, maxTokens int) []byte {
	return t.thread.forReplica(fits, model, replica, maxTokens)
}

func (t *threaded) threadID() string { return t.thread.id }

func (t *threaded) unsavedWhy() string { return t.thread.unsaved }
