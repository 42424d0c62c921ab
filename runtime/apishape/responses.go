package apishape

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// responsesKeys are the top-level keys of a Responses request that are
// translated; ignoredResponsesKeys are accepted and have no effect (they
// tune what OpenAI's own service does: reasoning effort, cache keys,
// service tiers, extra output). Any other key is refused.
var (
	responsesKeys = []string{"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens",
		"temperature", "top_p", "stream", "store", "previous_response_id", "metadata", "parallel_tool_calls",
		"user", "text", "truncation", "background"}
	ignoredResponsesKeys = []string{"reasoning", "include", "prompt_cache_key", "prompt_cache_retention",
		"service_tier", "safety_identifier", "stream_options", "top_logprobs"}
)

// ResponsesRequest is an OpenAI Responses API request.
type ResponsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	PreviousResponseID string            `json:"previous_response_id"`
	Metadata           map[string]string `json:"metadata"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	User               string            `json:"user"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	Truncation string `json:"truncation"`
	Background bool   `json:"background"`

	tools      []chatTool
	toolChoice any
	format     json.RawMessage
}

// ParseResponses reads a Responses request and checks what a translation
// needs.
func ParseResponses(body []byte) (*ResponsesRequest, *Error) {
	if e := checkKeys(body, responsesKeys, ignoredResponsesKeys); e != nil {
		return nil, e
	}
	var req ResponsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, decodeError(err)
	}
	if req.Model == "" {
		return nil, &Error{Status: 400, Code: "missing_model", Param: "model", Message: "you must provide a model parameter"}
	}
	if len(bytes.TrimSpace(req.Input)) == 0 && req.PreviousResponseID == "" {
		return nil, &Error{Status: 400, Code: "missing_required_parameter", Param: "input", Message: "missing required parameter: 'input'"}
	}
	if req.Background {
		return nil, unsupported("background", "background: true is not supported; a response is generated while the request is open")
	}
	if req.Truncation != "" && req.Truncation != "disabled" {
		return nil, unsupported("truncation", "truncation: %q is not supported; only \"disabled\"", req.Truncation)
	}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return nil, invalid("max_output_tokens", "max_output_tokens must be at least 1, got %d", *req.MaxOutputTokens)
	}
	for i, raw := range req.Tools {
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, invalid(fmt.Sprintf("tools[%d]", i), "tools[%d] must be an object, got %s", i, JSONKind(raw))
		}
		if t.Type != "function" {
			return nil, unsupported(fmt.Sprintf("tools[%d].type", i), "tools[%d]: tool type %q is not supported; only function tools are", i, t.Type)
		}
		if t.Name == "" {
			return nil, invalid(fmt.Sprintf("tools[%d].name", i), "missing required parameter: 'tools[%d].name'", i)
		}
		req.tools = append(req.tools, chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	if tc := bytes.TrimSpace(req.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		var s string
		var obj struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		switch {
		case json.Unmarshal(tc, &s) == nil:
			if s != "auto" && s != "none" && s != "required" {
				return nil, invalid("tool_choice", "tool_choice %q is not one of auto, none, required", s)
			}
			req.toolChoice = s
		case json.Unmarshal(tc, &obj) == nil && obj.Type == "function" && obj.Name != "":
			req.toolChoice = map[string]any{"type": "function", "function": map[string]string{"name": obj.Name}}
		default:
			return nil, unsupported("tool_choice", "tool_choice %s is not supported; use auto, none, required or {\"type\":\"function\",\"name\":...}", truncateJSON(tc))
		}
	}
	if req.Text != nil && len(bytes.TrimSpace(req.Text.Format)) > 0 {
		var f struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}
		if err := json.Unmarshal(req.Text.Format, &f); err != nil {
			return nil, invalid("text.format", "text.format must be an object, got %s", JSONKind(req.Text.Format))
		}
		switch f.Type {
		case "text", "":
		case "json_object":
			req.format = json.RawMessage(`{"type":"json_object"}`)
		case "json_schema":
			req.format = mustJSON(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": f.Name, "schema": f.Schema, "strict": f.Strict}})
		default:
			return nil, unsupported("text.format.type", "text.format.type %q is not one of text, json_object, json_schema", f.Type)
		}
	}
	return &req, nil
}

func truncateJSON(raw json.RawMessage) string {
	if len(raw) > 60 {
		return string(raw[:60]) + "..."
	}
	return string(raw)
}

// responsesItem is one input item.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type responsesPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL string `json:"image_url"`
	FileID   string `json:"file_id"`
	Detail   string `json:"detail"`
}

// InputMessages translates the request's input into chat messages.
func (req *ResponsesRequest) InputMessages() ([]ChatMessage, *Error) {
	raw := bytes.TrimSpace(req.Input)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []ChatMessage{{Role: "user", Content: textContent(s)}}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("input", "input must be a string or a list of items, got %s", JSONKind(raw))
	}
	var out []ChatMessage
	for i, it := range items {
		at := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			role := it.Role
			switch role {
			case "user", "assistant", "system":
			case "developer":
				role = "system"
			default:
				return nil, invalid(at+".role", "%s.role %q is not one of user, assistant, system, developer", at, it.Role)
			}
			content, err := responsesContent(it.Content, at+".content")
			if err != nil {
				return nil, err
			}
			out = append(out, ChatMessage{Role: role, Content: content})
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, invalid(at, "%s: a function_call needs call_id and name", at)
			}
			call := newToolCall(it.CallID, it.Name, it.Arguments)
			if n := len(out); n > 0 && out[n-1].Role == "assistant" {
				out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
			} else {
				out = append(out, ChatMessage{Role: "assistant", ToolCalls: []ChatToolCall{call}})
			}
		case "function_call_output":
			if it.CallID == "" {
				return nil, invalid(at+".call_id", "missing required parameter: '%s.call_id'", at)
			}
			text, err := outputText(it.Output, at+".output")
			if err != nil {
				return nil, err
			}
			out = append(out, ChatMessage{Role: "tool", ToolCallID: it.CallID, Content: textContent(text)})
		case "reasoning":
			// Reasoning items of earlier turns are not sent again.
		default:
			return nil, unsupported(at+".type", "%s: input item type %q is not supported", at, it.Type)
		}
	}
	return out, nil
}

// responsesContent translates a message's content: a string or parts.
func responsesContent(raw json.RawMessage, at string) (json.RawMessage, *Error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return textContent(s), nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, invalid(at, "%s must be a string or a list of content parts, got %s", at, JSONKind(raw))
	}
	var out []contentPart
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, contentPart{Type: "text", Text: p.Text})
		case "refusal":
			out = append(out, contentPart{Type: "text", Text: p.Refusal})
		case "input_image":
			if p.ImageURL == "" {
				return nil, unsupported(fmt.Sprintf("%s[%d]", at, j), "%s[%d]: an input_image needs image_url (a URL or a data: URL); file_id is not supported", at, j)
			}
			out = append(out, imagePart(p.ImageURL, p.Detail))
		default:
			return nil, unsupported(fmt.Sprintf("%s[%d].type", at, j), "%s[%d]: content type %q is not supported", at, j, p.Type)
		}
	}
	return partsContent(out), nil
}

// outputText reads a function_call_output's output: a string or text parts.
func outputText(raw json.RawMessage, at string) (string, *Error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(at, "%s must be a string or a list of content parts, got %s", at, JSONKind(raw))
	}
	var sb strings.Builder
	for j, p := range parts {
		if p.Type != "input_text" && p.Type != "output_text" {
			return "", unsupported(fmt.Sprintf("%s[%d].type", at, j), "%s[%d]: only text is supported in a function_call_output, got %q", at, j, p.Type)
		}
		sb.WriteString(p.Text)
	}
	return sb.String(), nil
}

// ToChat builds the chat completions request: instructions (as a system
// message; not kept for later turns, as OpenAI does not carry them over),
// then history (the conversation of previous_response_id), then the
// input. It returns the body and the conversation so far (history and
// input), which the answer extends.
func (req *ResponsesRequest) ToChat(history []ChatMessage) ([]byte, []ChatMessage, *Error) {
	input, err := req.InputMessages()
	if err != nil {
		return nil, nil, err
	}
	conv := append(append([]ChatMessage(nil), history...), input...)
	if len(conv) == 0 {
		return nil, nil, invalid("input", "input holds no message")
	}
	c := chatRequest{Model: req.Model, MaxTokens: req.MaxOutputTokens, Temperature: req.Temperature, TopP: req.TopP,
		Tools: req.tools, ToolChoice: req.toolChoice, ParallelToolCalls: req.ParallelToolCalls, ResponseFormat: req.format,
		User: req.User, Stream: req.Stream}
	if req.Instructions != nil && *req.Instructions != "" {
		c.Messages = append(c.Messages, ChatMessage{Role: "system", Content: textContent(*req.Instructions)})
	}
	c.Messages = append(c.Messages, conv...)
	return c.encode(), conv, nil
}

// ResponseMeta is what a response object says besides the answer.
type ResponseMeta struct {
	ID        string
	CreatedAt int64
	// Model is the model name the response reports.
	Model string
	// Stored is whether the response is kept for a later turn.
	Stored bool
}

type responsesUsage struct {
	InputTokens        int            `json:"input_tokens"`
	InputTokensDetails map[string]int `json:"input_tokens_details"`
	OutputTokens       int            `json:"output_tokens"`
	OutputTokensDetail map[string]int `json:"output_tokens_details"`
	TotalTokens        int            `json:"total_tokens"`
}

func toResponsesUsage(u *Usage) *responsesUsage {
	if u == nil {
		return nil
	}
	return &responsesUsage{InputTokens: u.PromptTokens, InputTokensDetails: map[string]int{"cached_tokens": u.CachedTokens},
		OutputTokens: u.CompletionTokens, OutputTokensDetail: map[string]int{"reasoning_tokens": 0}, TotalTokens: u.TotalTokens}
}

// responseObject is the Responses API's response.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	Error              any               `json:"error"`
	IncompleteDetails  any               `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []map[string]any  `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          map[string]any    `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        *float64          `json:"temperature"`
	Text               map[string]any    `json:"text"`
	ToolChoice         any               `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopP               *float64          `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *responsesUsage   `json:"usage"`
	User               *string           `json:"user"`
	Metadata           map[string]string `json:"metadata"`
}

// object renders the response with the given status and output.
func (req *ResponsesRequest) object(meta ResponseMeta, status string, output []map[string]any, usage *Usage, incomplete any) responseObject {
	o := responseObject{ID: meta.ID, Object: "response", CreatedAt: meta.CreatedAt, Status: status,
		IncompleteDetails: incomplete, Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens,
		Model: meta.Model, Output: output, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		Reasoning: map[string]any{"effort": nil, "summary": nil}, Store: meta.Stored, Temperature: req.Temperature,
		Text: map[string]any{"format": map[string]string{"type": "text"}}, ToolChoice: "auto", Tools: req.Tools,
		TopP: req.TopP, Truncation: "disabled", Usage: toResponsesUsage(usage), Metadata: req.Metadata}
	if o.Output == nil {
		o.Output = []map[string]any{}
	}
	if o.Tools == nil {
		o.Tools = []json.RawMessage{}
	}
	if o.Metadata == nil {
		o.Metadata = map[string]string{}
	}
	if req.PreviousResponseID != "" {
		o.PreviousResponseID = &req.PreviousResponseID
	}
	if req.User != "" {
		o.User = &req.User
	}
	if tc := bytes.TrimSpace(req.ToolChoice); len(tc) > 0 && string(tc) != "null" {
		o.ToolChoice = json.RawMessage(tc)
	}
	if req.Text != nil && len(req.Text.Format) > 0 {
		o.Text = map[string]any{"format": req.Text.Format}
	}
	return o
}

// itemID names an output item after its response: msg_<response id
// suffix>, fc_<suffix>_<n>.
func itemID(respID, prefix string, n int) string {
	suffix := strings.TrimPrefix(respID, "resp_")
	if n < 0 {
		return prefix + suffix
	}
	return fmt.Sprintf("%s%s_%d", prefix, suffix, n)
}

// messageItem is a message output item; one still in progress has no
// content yet, one completed or incomplete (cut short) its text.
func messageItem(id, text, status string) map[string]any {
	content := []map[string]any{}
	if status != "in_progress" {
		content = append(content, outputTextPart(text))
	}
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant", "content": content}
}

func outputTextPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

func callItem(id string, tc ChatToolCall, status string) map[string]any {
	return map[string]any{"type": "function_call", "id": id, "call_id": tc.ID, "name": tc.Function.Name,
		"arguments": tc.Function.Arguments, "status": status}
}

// itemStatus is a message item's status for a chat finish_reason:
// incomplete when the answer was cut short, else completed.
func itemStatus(finish string) string {
	if status, _ := finishStatus(finish); status == "incomplete" {
		return "incomplete"
	}
	return "completed"
}

// finishStatus maps a chat finish_reason to the response's status and
// incomplete_details.
func finishStatus(finish string) (string, any) {
	switch finish {
	case "length":
		return "incomplete", map[string]string{"reason": "max_output_tokens"}
	case "content_filter":
		return "incomplete", map[string]string{"reason": "content_filter"}
	}
	return "completed", nil
}

// ResponseFromResult renders the engine's whole answer as a response.
func (req *ResponsesRequest) ResponseFromResult(meta ResponseMeta, r *Result) []byte {
	var output []map[string]any
	if r.Text != "" || len(r.ToolCalls) == 0 {
		output = append(output, messageItem(itemID(meta.ID, "msg_", -1), r.Text, itemStatus(r.Finish)))
	}
	for i, tc := range r.ToolCalls {
		output = append(output, callItem(itemID(meta.ID, "fc_", i), tc, "completed"))
	}
	status, incomplete := finishStatus(r.Finish)
	return mustJSON(req.object(meta, status, output, r.Usage, incomplete))
}
