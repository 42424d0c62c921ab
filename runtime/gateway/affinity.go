package gateway

import "github.com/llmgw/llmgw/runtime/router"

// affinityKey is the routing key of a request: its prompt (a chat
// request's messages, a completion's prompt) cut into prefix blocks as the
// body holds it, before any rewrite. A conversation's next turn repeats the
// earlier turns byte for byte, and requests sharing a system prompt share
// its bytes, so their keys share leading blocks and the router can send them
// where that prefix is cached. Embeddings have no prefix cache to find.
func (req *parsedBody) affinityKey(body []byte, embeddings bool) router.Key {
	if embeddings || req.promptSpan.end <= req.promptSpan.start || req.promptSpan.end > len(body) {
		return nil
	}
	return router.PrefixKey(body[req.promptSpan.start:req.promptSpan.end])
}
