package apishape

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// messagesKeys are the top-level keys of a Messages request that are
// translated; ignoredMessagesKeys are accepted and have no effect (they
// tune Anthropic's own service: extended thinking, which the engines'
// chat API has no common switch for, context editing, caching, tiers,
// regions). Any other key is refused, as Anthropic refuses an unknown
// one.
var (
	messagesKeys = []string{"model", "max_tokens", "messages", "system", "stop_sequences", "stream",
		"temperature", "top_p", "top_k", "tools", "tool_choice", "metadata", "output_config"}
	ignoredMessagesKeys = []string{"thinking", "context_management", "service_tier", "cache_control", "inference_geo"}
)

// MessagesRequest is an Anthropic Messages API request.
type MessagesRequest struct {
	Model         string           `json:"model"`
	MaxTokens     *int             `json:"max_tokens"`
	Messages      []anthropicMsg   `json:"messages"`
	System        json.RawMessage  `json:"system"`
	StopSequences []string         `json:"stop_sequences"`
	Stream        bool             `json:"stream"`
	Temperature   *float64         `json:"temperature"`
	TopP          *float64         `json:"top_p"`
	TopK          *int             `json:"top_k"`
	Tools         []anthropicTool  `json:"tools"`
	ToolChoice    *anthropicChoice `json:"tool_choice"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	OutputConfig *struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"output_config"`
}

type anthropicMsg struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicBlock struct {
	Type string `json:"type"`
	// text
	Text string `json:"text"`
	// image
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type anthropicTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anthropicChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// checkKeys refuses a body key outside known and ignored, naming it, and
// a body that is not a JSON object.
func checkKeys(body []byte, known, ignored []string) *Error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		if err == nil {
			err = fmt.Errorf("got null")
		}
		return &Error{Status: 400, Code: "invalid_json", Message: fmt.Sprintf("the request body must be a JSON object: %v", err)}
	}
	var extra []string
	for k := range top {
		if !slices.Contains(known, k) && !slices.Contains(ignored, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return &Error{Status: 400, Code: "unknown_parameter", Param: extra[0],
			Message: fmt.Sprintf("%s: this parameter is not supported by llmgw's translation (see docs/client-apis.md)", strings.Join(extra, ", "))}
	}
	return nil
}

// decodeField explains a JSON type error in the request's own terms.
func decodeError(err error) *Error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		field := te.Field
		if field == "" {
			field = "the request body"
		}
		return &Error{Status: 400, Code: "invalid_type", Param: field,
			Message: fmt.Sprintf("%s: expected %s, got a JSON %s", field, te.Type.String(), te.Value)}
	}
	return &Error{Status: 400, Code: "invalid_json", Message: fmt.Sprintf("the request body is not valid JSON: %v", err)}
}

// ParseMessages reads an Anthropic Messages request.
func ParseMessages(body []byte) (*MessagesRequest, *Error) {
	if e := checkKeys(body, messagesKeys, ignoredMessagesKeys); e != nil {
		return nil, e
	}
	var req MessagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, decodeError(err)
	}
	if req.Model == "" {
		return nil, invalid("model", "model: field required")
	}
	if req.MaxTokens == nil {
		return nil, invalid("max_tokens", "max_tokens: field required")
	}
	if *req.MaxTokens < 1 {
		return nil, invalid("max_tokens", "max_tokens: must be at least 1, got %d", *req.MaxTokens)
	}
	if len(req.Messages) == 0 {
		return nil, invalid("messages", "messages: at least one message is required")
	}
	if oc := req.OutputConfig; oc != nil && oc.Format != nil && oc.Format.Type != "json_schema" {
		return nil, unsupported("output_config.format.type", "output_config.format.type: %q is not supported; only json_schema", oc.Format.Type)
	}
	return &req, nil
}

// ToChat translates the request into a chat completions request body.
func (req *MessagesRequest) ToChat() ([]byte, *Error) {
	c := chatRequest{Model: req.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP,
		TopK: req.TopK, Stop: req.StopSequences, Stream: req.Stream}
	if req.Metadata != nil {
		c.User = req.Metadata.UserID
	}
	if oc := req.OutputConfig; oc != nil && oc.Format != nil {
		c.ResponseFormat = mustJSON(map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "output", "schema": oc.Format.Schema, "strict": true}})
	}
	if sys, err := systemText(req.System); err != nil {
		return nil, err
	} else if sys != "" {
		c.Messages = append(c.Messages, ChatMessage{Role: "system", Content: textContent(sys)})
	}
	for i, m := range req.Messages {
		msgs, err := anthropicToChat(i, m)
		if err != nil {
			return nil, err
		}
		c.Messages = append(c.Messages, msgs...)
	}
	for i, t := range req.Tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, unsupported(fmt.Sprintf("tools[%d].type", i),
				"tools[%d]: tool type %q (a server tool) is not supported; only client tools with a name and an input_schema are", i, t.Type)
		}
		if t.Name == "" {
			return nil, invalid(fmt.Sprintf("tools[%d].name", i), "tools[%d].name: field required", i)
		}
		c.Tools = append(c.Tools, chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			c.ToolChoice = "auto"
		case "any":
			c.ToolChoice = "required"
		case "none":
			c.ToolChoice = "none"
		case "tool":
			if tc.Name == "" {
				return nil, invalid("tool_choice.name", "tool_choice.name: field required when type is \"tool\"")
			}
			c.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		default:
			return nil, invalid("tool_choice.type", "tool_choice.type: %q is not one of auto, any, tool, none", tc.Type)
		}
		if tc.DisableParallelToolUse {
			no := false
			c.ParallelToolCalls = &no
		}
	}
	return c.encode(), nil
}

// systemText reads system: a string or a list of text blocks.
func systemText(raw json.RawMessage) (string, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", invalid("system", "system: must be a string or a list of text blocks, got %s", JSONKind(raw))
	}
	var parts []string
	for i, b := range blocks {
		if b.Type != "text" {
			return "", unsupported(fmt.Sprintf("system[%d].type", i), "system[%d]: block type %q is not supported in system; only text", i, b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

// blocksOf reads a message's content: a string is one text block.
func blocksOf(raw json.RawMessage, where string) ([]anthropicBlock, *Error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, invalid(where, "%s: must be a string or a list of content blocks, got %s", where, JSONKind(raw))
	}
	return blocks, nil
}

// anthropicToChat translates one message. A user message's tool_result
// blocks become tool messages, put first (chat wants them right after the
// assistant's calls); its other blocks one user message after them.
func anthropicToChat(i int, m anthropicMsg) ([]ChatMessage, *Error) {
	where := fmt.Sprintf("messages[%d].content", i)
	blocks, err := blocksOf(m.Content, where)
	if err != nil {
		return nil, err
	}
	switch m.Role {
	case "user", "assistant":
	default:
		return nil, invalid(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: %q is not one of user, assistant (system goes in the top-level system)", i, m.Role)
	}
	var out []ChatMessage
	var parts []contentPart
	var calls []ChatToolCall
	for j, b := range blocks {
		at := fmt.Sprintf("%s[%d]", where, j)
		switch {
		case b.Type == "text":
			parts = append(parts, contentPart{Type: "text", Text: b.Text})
		case b.Type == "image" && m.Role == "user":
			url, err := imageURL(b, at)
			if err != nil {
				return nil, err
			}
			parts = append(parts, imagePart(url, ""))
		case b.Type == "tool_use" && m.Role == "assistant":
			args := "{}"
			if in := bytes.TrimSpace(b.Input); len(in) > 0 && string(in) != "null" {
				args = string(in)
			}
			calls = append(calls, newToolCall(b.ID, b.Name, args))
		case b.Type == "tool_result" && m.Role == "user":
			text, err := toolResultText(b.Content, at)
			if err != nil {
				return nil, err
			}
			if b.IsError && text != "" {
				text = "Error: " + text
			}
			out = append(out, ChatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: textContent(text)})
		case b.Type == "thinking" || b.Type == "redacted_thinking":
			// Earlier turns' thinking is not the model's to read again.
		default:
			return nil, unsupported(at+".type", "%s: content block type %q is not supported in a %s message", at, b.Type, m.Role)
		}
	}
	if len(parts) > 0 || len(calls) > 0 || len(out) == 0 {
		msg := ChatMessage{Role: m.Role, ToolCalls: calls}
		if len(parts) > 0 || len(calls) == 0 {
			msg.Content = partsContent(parts)
		}
		out = append(out, msg)
	}
	return out, nil
}

func imageURL(b anthropicBlock, at string) (string, *Error) {
	if b.Source == nil {
		return "", invalid(at+".source", "%s.source: field required", at)
	}
	switch b.Source.Type {
	case "base64":
		return "data:" + b.Source.MediaType + ";base64," + b.Source.Data, nil
	case "url":
		return b.Source.URL, nil
	}
	return "", unsupported(at+".source.type", "%s.source.type: %q is not supported; use base64 or url", at, b.Source.Type)
}

// toolResultText reads a tool_result's content: a string or text blocks.
func toolResultText(raw json.RawMessage, at string) (string, *Error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", nil
	}
	blocks, err := blocksOf(raw, at+".content")
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for k, b := range blocks {
		if b.Type != "text" {
			return "", unsupported(fmt.Sprintf("%s.content[%d].type", at, k), "%s.content[%d]: only text is supported in a tool_result, got %q", at, k, b.Type)
		}
		sb.WriteString(b.Text)
	}
	return sb.String(), nil
}

// AnthropicUsage is the Messages API's usage object.
type AnthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// CacheReadInputTokens is the part of the prompt the engine had cached.
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
	// CacheCreationInputTokens is always 0: engines cache by themselves.
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func anthropicUsage(u *Usage) AnthropicUsage {
	if u == nil {
		return AnthropicUsage{}
	}
	// Anthropic counts cache reads apart from input_tokens.
	return AnthropicUsage{InputTokens: u.PromptTokens - u.CachedTokens, OutputTokens: u.CompletionTokens, CacheReadInputTokens: u.CachedTokens}
}

// anthropicMessage is the Messages API's answer.
type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []map[string]any `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        AnthropicUsage   `json:"usage"`
}

// stopReason maps a chat finish_reason to the Messages stop_reason, and
// the stop sequence that matched when the engine said which.
func stopReason(r *Result, stops []string) (string, *string) {
	switch r.Finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls", "function_call":
		return "tool_use", nil
	case "content_filter":
		return "refusal", nil
	case "stop":
		if r.StopString != "" && slices.Contains(stops, r.StopString) {
			s := r.StopString
			return "stop_sequence", &s
		}
	}
	return "end_turn", nil
}

// toolInput reads a call's arguments as the object tool_use.input is; an
// engine that wrote something else has it kept under "arguments".
func toolInput(args string) json.RawMessage {
	raw := json.RawMessage(strings.TrimSpace(args))
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil && obj != nil {
		return raw
	}
	return mustJSON(map[string]string{"arguments": args})
}

// MessageFromResult renders the engine's answer as a Messages API message.
func MessageFromResult(r *Result, id, model string, stops []string) []byte {
	m := anthropicMessage{ID: id, Type: "message", Role: "assistant", Model: model, Content: []map[string]any{}, Usage: anthropicUsage(r.Usage)}
	if r.Text != "" {
		m.Content = append(m.Content, map[string]any{"type": "text", "text": r.Text})
	}
	for _, tc := range r.ToolCalls {
		m.Content = append(m.Content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": toolInput(tc.Function.Arguments)})
	}
	reason, seq := stopReason(r, stops)
	m.StopReason, m.StopSequence = &reason, seq
	return mustJSON(m)
}
