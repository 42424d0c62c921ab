package simengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// chatRequest is the part of an OpenAI chat completion request the engine
// reads; other fields (temperature, seed, ...) are accepted and ignored.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Tools               []chatTool      `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatTool struct {
	Type     string        `json:"type"`
	Function *toolFunction `json:"function"`
}

type toolFunction struct {
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters"`
}

// chatCompletion is OpenAI's chat.completion object.
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatChoice struct {
	Index        int       `json:"index"`
	Message      chatReply `json:"message"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
}

type chatReply struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// chatChunk is OpenAI's chat.completion.chunk object.
type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usage            `json:"usage,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function functionDelta `json:"function"`
}

type functionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// chatOutput is what one chat request produces: either words or a tool call
// whose arguments are streamed in fragments. Either way each piece is one
// completion token.
type chatOutput struct {
	words     []string
	tool      *toolCall
	fragments []string
	finish    string
}

func (o chatOutput) pieces() int {
	if o.tool != nil {
		return len(o.fragments)
	}
	return len(o.words)
}

func (e *Engine) handleChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req chatRequest
	if !decodeBody(w, r, &req) || !e.checkModel(w, req.Model) {
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages must not be empty", "messages", "")
		return
	}
	if req.N != nil && *req.N != 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("n must be 1 on the sim engine, got %d", *req.N), "n", "")
		return
	}
	var texts []string
	for i, m := range req.Messages {
		key := fmt.Sprintf("messages[%d].content", i)
		t, err := messageText(m.Content, key)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error(), key, "")
			return
		}
		texts = append(texts, t)
	}
	prompt := tokenize(strings.Join(texts, " "))
	maxTokens, maxParam := req.MaxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, maxParam = req.MaxTokens, "max_tokens"
	}
	if !e.checkPrompt(w, len(prompt), maxTokens, maxParam) {
		return
	}
	fn, call, err := chooseTool(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "tool_choice", "")
		return
	}

	var out chatOutput
	if call {
		tc := buildToolCall(prompt, fn)
		out = chatOutput{tool: &tc, fragments: splitFragments(tc.Function.Arguments, 8), finish: "tool_calls"}
	} else {
		plan := overshoot(planCompletion(maxTokens, len(prompt), e.cfg.MaxModelLen, e.cfg.EOSAfter, req.IgnoreEOS),
			maxTokens, e.cfg.OvershootTokens)
		src := newWordSource(hashTokens(prompt))
		out = chatOutput{words: make([]string, plan.tokens), finish: plan.finishReason}
		for i := range out.words {
			out.words[i] = src.next()
		}
	}

	id := newID("chatcmpl")
	var cached int
	if req.Stream {
		cached, err = e.streamChat(w, r, start, id, prompt, out, req.StreamOptions)
	} else {
		cached, err = e.execute(r.Context(), start, prompt, out.pieces(), func(int) error { return nil })
		if err == nil {
			writeJSON(w, http.StatusOK, e.chatResponse(id, out, newUsage(len(prompt), out.pieces(), cached)))
		}
	}
	e.finish(err, out.finish)
	if err == nil && out.tool == nil {
		e.cache.insert(append(prompt, out.words...))
	}
	e.log.Debug("chat completion", "id", id, "stream", req.Stream, "prompt_tokens", len(prompt),
		"cached_tokens", cached, "completion_tokens", out.pieces(), "finish_reason", out.finish, "err", err)
}

func (e *Engine) chatResponse(id string, out chatOutput, u *usage) chatCompletion {
	reply := chatReply{Role: "assistant"}
	if out.tool != nil {
		reply.ToolCalls = []toolCall{*out.tool}
	} else {
		text := strings.Join(out.words, " ")
		reply.Content = &text
	}
	return chatCompletion{
		ID:      id,
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   e.cfg.ServedModelName,
		Choices: []chatChoice{{Index: 0, Message: reply, FinishReason: out.finish}},
		Usage:   u,
	}
}

// streamChat streams out as chat.completion.chunk events: a first chunk with
// the role (and, for a tool call, its id and name), one chunk per piece, a
// chunk with the finish reason, the usage chunk when asked, then [DONE].
func (e *Engine) streamChat(w http.ResponseWriter, r *http.Request, start time.Time, id string, prompt []string, out chatOutput, opts *streamOptions) (int, error) {
	sse := newSSEWriter(w)
	created := time.Now().Unix()
	chunk := func(d chatDelta, finish *string) chatChunk {
		return chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: e.cfg.ServedModelName,
			Choices: []chatChunkChoice{{Index: 0, Delta: d, FinishReason: finish}},
		}
	}
	cached, err := e.execute(r.Context(), start, prompt, out.pieces(), func(i int) error {
		if out.tool != nil {
			if i == 0 {
				first := chatDelta{Role: "assistant", ToolCalls: []toolCallDelta{{
					Index: 0, ID: out.tool.ID, Type: "function",
					Function: functionDelta{Name: out.tool.Function.Name},
				}}}
				if err := sse.send(chunk(first, nil)); err != nil {
					return err
				}
			}
			return sse.send(chunk(chatDelta{ToolCalls: []toolCallDelta{{
				Index: 0, Function: functionDelta{Arguments: out.fragments[i]},
			}}}, nil))
		}
		if i == 0 {
			empty := ""
			if err := sse.send(chunk(chatDelta{Role: "assistant", Content: &empty}, nil)); err != nil {
				return err
			}
		}
		piece := out.words[i]
		if i > 0 {
			piece = " " + piece
		}
		return sse.send(chunk(chatDelta{Content: &piece}, nil))
	})
	if err != nil {
		return cached, err
	}
	finish := out.finish
	if err := sse.send(chunk(chatDelta{}, &finish)); err != nil {
		return cached, err
	}
	if opts != nil && opts.IncludeUsage {
		final := chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: e.cfg.ServedModelName,
			Choices: []chatChunkChoice{}, Usage: newUsage(len(prompt), out.pieces(), cached),
		}
		if err := sse.send(final); err != nil {
			return cached, err
		}
	}
	return cached, sse.done()
}

// messageText is a message's text: a string, null, or the text parts of an
// array of content parts (other parts such as images are skipped). key is
// where the content sits (messages[0].content), for errors.
func messageText(raw json.RawMessage, key string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("%s is not valid JSON: %w", key, err)
		}
		var texts []string
		for j, part := range parts {
			var p struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(part, &p); err != nil {
				if msg, _, ok := decodeError(fmt.Sprintf("%s[%d]", key, j), &p, err); ok {
					return "", errors.New(msg)
				}
				return "", fmt.Errorf("%s[%d] is not valid JSON: %w", key, j, err)
			}
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		return strings.Join(texts, " "), nil
	}
	return "", fmt.Errorf("%s must be a string or an array of content parts", key)
}

// chooseTool decides whether the reply is a tool call and to which
// function: the one tool_choice names, else the first function. tool_choice
// "none" means text; so does "auto" right after a tool result, so that an
// agent loop driven by the sim engine ends.
func chooseTool(req chatRequest) (*toolFunction, bool, error) {
	var functions []*toolFunction
	for _, t := range req.Tools {
		if (t.Type == "function" || t.Type == "") && t.Function != nil {
			functions = append(functions, t.Function)
		}
	}
	choice := "auto"
	var named string
	raw := bytes.TrimSpace(req.ToolChoice)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &choice); err != nil {
			return nil, false, fmt.Errorf("tool_choice: %w", err)
		}
		if choice != "none" && choice != "auto" && choice != "required" {
			return nil, false, fmt.Errorf("tool_choice %q is not one of none, auto, required", choice)
		}
	case raw[0] != '{':
		got := string(raw)
		if len(got) > 40 {
			got = got[:40] + "..."
		}
		return nil, false, fmt.Errorf("tool_choice must be a string or an object, got %s", got)
	default:
		var obj struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			if msg, _, ok := decodeError("tool_choice", &obj, err); ok {
				return nil, false, errors.New(msg)
			}
			return nil, false, fmt.Errorf("tool_choice is not valid JSON: %w", err)
		}
		named, choice = obj.Function.Name, "required"
	}
	if choice == "none" {
		return nil, false, nil
	}
	if len(functions) == 0 {
		if choice == "required" {
			return nil, false, fmt.Errorf("tool_choice %s needs at least one function in tools", choiceName(choice, named))
		}
		return nil, false, nil
	}
	if named != "" {
		for _, f := range functions {
			if f.Name == named {
				return f, true, nil
			}
		}
		return nil, false, fmt.Errorf("tool_choice names function %q, which is not in tools", named)
	}
	if choice == "auto" && req.Messages[len(req.Messages)-1].Role == "tool" {
		return nil, false, nil
	}
	return functions[0], true, nil
}

func choiceName(choice, named string) string {
	if named != "" {
		return fmt.Sprintf("%q", named)
	}
	return fmt.Sprintf("%q", choice)
}

// buildToolCall makes the deterministic call to fn for this prompt.
func buildToolCall(prompt []string, fn *toolFunction) toolCall {
	seed := hashString(fmt.Sprintf("%016x", hashTokens(prompt)), fn.Name)
	args := fillSchema(fn.Parameters, newWordSource(seed), 0)
	if _, ok := args.(map[string]any); !ok {
		args = map[string]any{}
	}
	b, _ := json.Marshal(args) // maps, strings, numbers and raw JSON always encode
	return toolCall{
		ID:       fmt.Sprintf("call_%016x", seed),
		Type:     "function",
		Function: functionCall{Name: fn.Name, Arguments: string(b)},
	}
}

// maxSchemaDepth bounds recursion into nested object and array schemas.
const maxSchemaDepth = 8

// fillSchema makes a value that satisfies a JSON schema in the simple way a
// test wants: the first enum value, a word for strings, 1 for numbers, true
// for booleans, one item for arrays and every property for objects.
func fillSchema(raw json.RawMessage, words *wordSource, depth int) any {
	var s struct {
		Type       json.RawMessage            `json:"type"`
		Enum       []json.RawMessage          `json:"enum"`
		Properties map[string]json.RawMessage `json:"properties"`
		Items      json.RawMessage            `json:"items"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return words.next()
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	typ := schemaType(s.Type)
	if typ == "" && s.Properties != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		obj := map[string]any{}
		if depth >= maxSchemaDepth {
			return obj
		}
		keys := make([]string, 0, len(s.Properties))
		for k := range s.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys) // draw words in a stable order
		for _, k := range keys {
			obj[k] = fillSchema(s.Properties[k], words, depth+1)
		}
		return obj
	case "array":
		if len(s.Items) == 0 || depth >= maxSchemaDepth {
			return []any{}
		}
		return []any{fillSchema(s.Items, words, depth+1)}
	case "number", "integer":
		return 1
	case "boolean":
		return true
	case "null":
		return nil
	default:
		return words.next()
	}
}

// schemaType reads "type": a string, or the first non-null of a list.
func schemaType(raw json.RawMessage) string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, t := range many {
			if t != "null" {
				return t
			}
		}
	}
	return ""
}

// splitFragments cuts s into pieces of at most n bytes on rune boundaries,
// the way a tool call's arguments arrive over a stream.
func splitFragments(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		cut := min(n, len(s))
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}
