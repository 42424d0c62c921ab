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
	"strings"

	"github.com/llmgw/llmgw/runtime/request"
)

// parsedBody is what the gateway reads from an inference request body;
// the body itself is forwarded as sent, except for the edits below.
//
// Each key the gateway reads may appear once at the top level: a repeated
// one is refused (see readKeys), so that what admission counts is what the
// engine reads, whichever of the duplicates an engine's parser would keep.
type parsedBody struct {
	model string
	// stream is the client's "stream" flag.
	stream bool
	// includeUsage is the client's stream_options.include_usage.
	includeUsage bool
	// maxTokens is the completion bound the client asked for:
	// max_completion_tokens, else max_tokens, else n_predict (the first
	// that is set and not 0); 0 when none is.
	maxTokens int
	n         int
	bestOf    int
	// prompts is how many prompts a /v1/completions request holds (each
	// gets its own completions); tokenIDs is whether they are token ids.
	prompts  int
	tokenIDs bool

	// seen holds the read keys met so far, one bit each.
	seen uint16
	// objStart is the offset just past the body's opening brace.
	objStart int
	// modelSpan is the byte range of the top-level "model" value.
	modelSpan span
	// streamOptions is the range of the top-level "stream_options" value,
	// if present.
	streamOptions    span
	hasStreamOptions bool
	// promptSpan is the byte range of the "messages" (chat) or "prompt"
	// (completions) value, from which the routing key is cut.
	promptSpan span
	// bounds are the completion bounds the body holds (max_tokens,
	// max_completion_tokens, n_predict), whatever their value, null
	// included: each is set to the bound admission reserved for.
	bounds []bound
}

// bound is one completion-bound key of the body and its value (0 when
// null).
type bound struct {
	key   string
	value int
	span
}

// readKeys are the top-level keys the gateway reads; each has a bit in
// parsedBody.seen. Three bound the completion: vLLM and SGLang read
// max_completion_tokens, else max_tokens; llama.cpp reads n_predict before
// max_tokens.
var readKeys = []string{"model", "stream", "stream_options", "max_tokens", "max_completion_tokens",
	"n_predict", "n", "best_of", "prompt"}

type span struct{ start, end int }

// readBody reads at most limit bytes of the request body.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apiError) {
	tooLarge := func() *apiError {
		return newError(http.StatusRequestEntityTooLarge, typeInvalidRequest, "request_too_large",
			fmt.Sprintf("request body is larger than the limit of %d bytes", limit))
	}
	if r.ContentLength > limit {
		return nil, tooLarge()
	}
	size := 512
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + 1 // +1 so ReadAll sees EOF without growing
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge()
		}
		return nil, newError(http.StatusBadRequest, typeInvalidRequest, "",
			fmt.Sprintf("reading request body: %v", err))
	}
	return buf.Bytes(), nil
}

func badJSON(format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, typeInvalidRequest, "invalid_json", fmt.Sprintf(format, args...))
}

// parseRequest walks the top level of a JSON object body and decodes only
// the fields the gateway needs, remembering where "model", "stream_options"
// and the completion bounds sit so they can be rewritten in place. Keys
// match exactly after unescaping (as the engines match them:
// "max\u005ftokens" is max_tokens). A key the gateway reads that appears
// twice is refused: engines keep the last occurrence, other parsers the
// first, and the gateway must count what the engine reads. So is a key
// that differs from one it reads only in case ("MAX_TOKENS"), which a
// case-insensitive parser would read as that key.
//
// A valid JSON object (validJSON: encoding/json.Valid's answer, faster) is walked by
// hand (parseValid), without the decoder's tokens and copies; anything
// else goes through the decoder (parseStrict), whose errors name what is
// wrong. Both find the same keys, values and spans (FuzzParseAgrees).
func parseRequest(body []byte) (*parsedBody, *apiError) {
	if req, ok, aerr := parseValid(body); ok {
		return req, aerr
	}
	return parseStrict(body)
}

// parseStrict is parseRequest through encoding/json's decoder.
func parseStrict(body []byte) (*parsedBody, *apiError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, badJSON("request body is not valid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, badJSON("request body must be a JSON object")
	}
	req := &parsedBody{objStart: int(dec.InputOffset())}
	var raw json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, badJSON("request body is not valid JSON: %v", err)
		}
		key, _ := tok.(string)
		keyEnd := int(dec.InputOffset())
		if err := dec.Decode(&raw); err != nil {
			return nil, badJSON("request body is not valid JSON: reading %q: %v", key, err)
		}
		start := skipColon(body, keyEnd)
		sp := span{start, start + len(raw)}
		if sp.end > len(body) || !bytes.Equal(body[sp.start:sp.end], raw) {
			return nil, badJSON("request body is not valid JSON: cannot locate %q", key)
		}
		if err := req.field(key, raw, sp); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, badJSON("request body is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badJSON("request body has data after the JSON object")
	}
	return req.finish()
}

// parseValid is parseRequest for a body that is a valid JSON object; ok
// is false for any other body.
func parseValid(body []byte) (req *parsedBody, ok bool, aerr *apiError) {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' || !validJSON(body) {
		return nil, false, nil
	}
	req = &parsedBody{objStart: i + 1}
	// The body is valid: every key is a string followed by a colon and a
	// value, and the values are separated by commas.
	for i = skipSpace(body, i+1); body[i] != '}'; {
		keyEnd := skipString(body, i)
		key, ok := jsonString(body[i:keyEnd])
		if !ok {
			return nil, false, nil
		}
		start := skipColon(body, keyEnd)
		end := skipValue(body, start)
		if err := req.field(key, body[start:end:end], span{start, end}); err != nil {
			return nil, true, err
		}
		if i = skipSpace(body, end); body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	req, aerr = req.finish()
	return req, true, aerr
}

// jsonString decodes a JSON string literal; a plain one (printable ASCII,
// no escape) without encoding/json.
func jsonString(lit []byte) (string, bool) {
	if len(lit) < 2 {
		return "", false
	}
	plain := true
	for _, c := range lit[1 : len(lit)-1] {
		if c < 0x20 || c >= 0x80 || c == '\\' || c == '"' {
			plain = false
			break
		}
	}
	if plain {
		return string(lit[1 : len(lit)-1]), true
	}
	var s string
	if json.Unmarshal(lit, &s) != nil {
		return "", false
	}
	return s, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipString returns the offset just past the JSON string starting at
// b[i] (a quote), in a valid document.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the offset just past the JSON value starting at b[i],
// in a valid document.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	// A number, true, false or null: up to the next delimiter.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// finish checks what a walked body must hold and picks its bound.
func (req *parsedBody) finish() (*parsedBody, *apiError) {
	if req.model == "" {
		return nil, newError(http.StatusBadRequest, typeInvalidRequest, "missing_model",
			"you must provide a model parameter").withParam("model")
	}
	for _, key := range []string{"max_completion_tokens", "max_tokens", "n_predict"} {
		for _, b := range req.bounds {
			if b.key == key && req.maxTokens == 0 {
				req.maxTokens = b.value
			}
		}
	}
	return req, nil
}

// field records one top-level key.
func (req *parsedBody) field(key string, raw json.RawMessage, sp span) *apiError {
	if i := slices.Index(readKeys, key); i >= 0 {
		if req.seen&(1<<i) != 0 {
			return newError(http.StatusBadRequest, typeInvalidRequest, "duplicate_key",
				fmt.Sprintf("%s appears more than once in the request body; send each parameter once", key)).withParam(key)
		}
		req.seen |= 1 << i
	} else if i := slices.IndexFunc(readKeys, func(k string) bool { return strings.EqualFold(k, key) }); i >= 0 {
		// Go's encoding/json (the sim engine's parser) matches struct
		// fields this way, Kelvin sign and long s included; Python's does
		// not. Refused, as OpenAI refuses an unknown parameter, so that
		// no engine can read it as the key the gateway did not.
		return newError(http.StatusBadRequest, typeInvalidRequest, "unknown_parameter",
			fmt.Sprintf("unrecognized request argument %q: parameter names are case-sensitive; did you mean %s?",
				key, readKeys[i])).withParam(key)
	}
	invalid := func(what string) *apiError {
		return newError(http.StatusBadRequest, typeInvalidRequest, "invalid_type",
			fmt.Sprintf("%s must be %s, got %s", key, what, truncate(raw, 40))).withParam(key)
	}
	switch key {
	case "model":
		var s string
		if len(raw) > 0 && raw[0] == '"' {
			var ok bool
			if s, ok = jsonString(raw); !ok {
				return invalid("a string")
			}
		} else if err := json.Unmarshal(raw, &s); err != nil {
			return invalid("a string")
		}
		req.model = s
		req.modelSpan = sp
	case "stream":
		switch string(raw) {
		case "true":
			req.stream = true
		case "false", "null":
			req.stream = false
		default:
			var b *bool
			if err := json.Unmarshal(raw, &b); err != nil {
				return invalid("a boolean")
			}
			req.stream = b != nil && *b
		}
	case "stream_options":
		var o *struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return invalid("an object")
		}
		req.includeUsage = o != nil && o.IncludeUsage != nil && *o.IncludeUsage
		req.streamOptions, req.hasStreamOptions = sp, true
	case "max_tokens", "max_completion_tokens", "n_predict", "n", "best_of":
		value, ok := 0, false
		if string(raw) == "null" {
			ok = true
		} else if n, err := strconv.Atoi(string(raw)); err == nil {
			value, ok = n, true // what encoding/json makes of an integer literal
		}
		if !ok {
			var v *int
			if err := json.Unmarshal(raw, &v); err != nil {
				return invalid("an integer")
			}
			if v != nil {
				value = *v
			}
		}
		limit := request.MaxTokens
		if key == "n" || key == "best_of" {
			limit = request.MaxChoices
		}
		if value < 0 || value > limit {
			return newError(http.StatusBadRequest, typeInvalidRequest, "invalid_value",
				fmt.Sprintf("%s must be between 0 and %d, got %d", key, limit, value)).withParam(key)
		}
		switch key {
		case "n":
			req.n = value
		case "best_of":
			req.bestOf = value
		default:
			req.bounds = append(req.bounds, bound{key, value, sp})
		}
	case "prompt":
		req.prompts, req.tokenIDs = countPrompts(raw)
		req.promptSpan = sp
	case "messages":
		req.promptSpan = sp
		return checkMessages(raw)
	}
	return nil
}

// countPrompts tells how many prompts a completions "prompt" holds and
// whether they are token ids: a string is one prompt, a list of strings or
// of token-id lists is one per element, a list of numbers is one prompt of
// token ids.
func countPrompts(raw json.RawMessage) (n int, tokenIDs bool) {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return 1, false
	}
	switch first := bytes.TrimSpace(list[0]); {
	case len(first) > 0 && first[0] == '[':
		return len(list), true
	case len(first) > 0 && (first[0] == '-' || first[0] >= '0' && first[0] <= '9'):
		return 1, true
	default:
		return len(list), false
	}
}

// checkLimits refuses, as OpenAI does, a completion bound above what the
// model can produce: its max_output, else its context_length.
func (req *parsedBody) checkLimits(l request.Limits) *apiError {
	limit := l.Completion()
	if limit <= 0 {
		return nil
	}
	for _, b := range req.bounds {
		if b.value <= limit {
			continue
		}
		msg := fmt.Sprintf("%s is too large: %d. This model supports at most %d completion tokens, whereas you provided %d.",
			b.key, b.value, limit, b.value)
		if l.MaxOutput <= 0 {
			msg = fmt.Sprintf("%s is too large: %d. This model's maximum context length is %d tokens, prompt and completion together, whereas you provided %d.",
				b.key, b.value, limit, b.value)
		}
		return newError(http.StatusBadRequest, typeInvalidRequest, "invalid_value", msg).withParam(b.key)
	}
	return nil
}

func skipColon(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n', ':':
			i++
		default:
			return i
		}
	}
	return i
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

type edit struct {
	span
	with []byte
}

// rewrite returns body with the top-level "model" set to canonical, every
// completion bound (max_tokens, max_completion_tokens, n_predict) set to
// maxTokens when it is not 0 (and max_tokens added when the body has none,
// since not every engine reads the other two), and, when injectUsage,
// stream_options.include_usage set to true. It returns body itself when
// nothing changes.
//
// It splices at the spans parseRequest recorded rather than calling
// tidwall/sjson or re-encoding the body: the edit lands on exactly the key
// the gateway read, however it was spelled ("max\u005ftokens" included),
// the body is not parsed again (sjson.Set parses for each edit), and no
// other byte of it changes (a re-encoding would rewrite the numbers, key
// order and escapes the engine sees).
func (req *parsedBody) rewrite(body []byte, canonical string, injectUsage bool, maxTokens int) ([]byte, error) {
	var edits []edit
	if req.model != canonical {
		quoted, err := json.Marshal(canonical)
		if err != nil {
			return nil, fmt.Errorf("encoding model name %q: %w", canonical, err)
		}
		edits = append(edits, edit{req.modelSpan, quoted})
	}
	if maxTokens > 0 {
		n := []byte(strconv.Itoa(maxTokens))
		hasMaxTokens := false
		for _, b := range req.bounds {
			edits = append(edits, edit{b.span, n})
			hasMaxTokens = hasMaxTokens || b.key == "max_tokens"
		}
		if !hasMaxTokens {
			// Every engine reads max_tokens; not all read the others.
			// The object has at least "model", so a trailing comma is right.
			edits = append(edits, edit{span{req.objStart, req.objStart},
				[]byte(`"max_tokens":` + string(n) + `,`)})
		}
	}
	if injectUsage {
		if req.hasStreamOptions {
			opts := map[string]json.RawMessage{}
			raw := body[req.streamOptions.start:req.streamOptions.end]
			if err := json.Unmarshal(raw, &opts); err != nil {
				return nil, fmt.Errorf("decoding stream_options: %w", err)
			}
			if opts == nil { // "stream_options": null
				opts = map[string]json.RawMessage{}
			}
			opts["include_usage"] = json.RawMessage("true")
			enc, err := json.Marshal(opts)
			if err != nil {
				return nil, fmt.Errorf("encoding stream_options: %w", err)
			}
			edits = append(edits, edit{req.streamOptions, enc})
		} else {
			// The object has at least "model", so a trailing comma is right.
			edits = append(edits, edit{span{req.objStart, req.objStart},
				[]byte(`"stream_options":{"include_usage":true},`)})
		}
	}
	if len(edits) == 0 {
		return body, nil
	}
	slices.SortStableFunc(edits, func(a, b edit) int { return a.start - b.start })
	grow := 0
	for _, e := range edits {
		grow += len(e.with) - (e.end - e.start)
	}
	out := make([]byte, 0, len(body)+max(grow, 0))
	prev := 0
	for _, e := range edits {
		out = append(out, body[prev:e.start]...)
		out = append(out, e.with...)
		prev = e.end
	}
	return append(out, body[prev:]...), nil
}
