package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/llmgw/llmgw/runtime/apishape"
)

// checkMessages refuses a top-level "messages" that is not an array, with
// OpenAI's error body naming the field and the JSON types ("messages must
// be an array, got a string"). The gateway answers it itself so that the
// client gets the same answer whatever engine serves the model, instead of
// the engine parser's own words (Go or Python type names). What is inside
// the array is the engine's to judge.
func checkMessages(raw json.RawMessage) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		return nil
	}
	return newError(http.StatusBadRequest, typeInvalidRequest, "invalid_type",
		"messages must be an array, got "+apishape.JSONKind(raw)).withParam("messages")
}
