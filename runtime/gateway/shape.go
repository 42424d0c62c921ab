package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
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
		"messages must be an array, got "+jsonKindOf(raw)).withParam("messages")
}

// jsonKindOf names the JSON type of a valid JSON value: "a string", "an
// object", "null".
func jsonKindOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
