// Package apishape translates the client APIs llmgw serves on top of an
// engine's chat completions API: Anthropic's Messages API (/v1/messages)
// and OpenAI's Responses API (/v1/responses). A request in either shape
// becomes one chat completions request; the engine's answer, whole or
// streamed, becomes the answer in the client's shape.
//
// Pure translation: no I/O, no clock, no randomness (ids and times are
// given by the caller), so every mapping is table-tested.
//
// Files: chat.go (the chat completions side both share: the request
// built, the answer read whole or chunk by chunk), anthropic.go (Messages
// request and answer), anthropic_stream.go (its server-sent events),
// responses.go and responses_stream.go (the same for Responses).
package apishape

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Error is a request the translation refuses: the HTTP status, a type and
// code in OpenAI's vocabulary (the gateway renders it in the client API's
// own error shape) and the parameter at fault.
type Error struct {
	Status  int
	Code    string
	Param   string
	Message string
}

func (e *Error) Error() string { return e.Message }

func invalid(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid_value", Param: param, Message: fmt.Sprintf(format, args...)}
}

func unsupported(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "unsupported_value", Param: param, Message: fmt.Sprintf(format, args...)}
}

// ChatMessage is one message of a chat completions request. Content is a
// string or a list of content parts, as JSON.
type ChatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []ChatToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// ChatToolCall is a function call an assistant message made.
type ChatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func newToolCall(id, name, args string) ChatToolCall {
	tc := ChatToolCall{ID: id, Type: "function"}
	tc.Function.Name, tc.Function.Arguments = name, args
	return tc
}

// chatTool is a function the model may call.
type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// chatRequest is the chat completions request a translation builds.
type chatRequest struct {
	Model             string          `json:"model"`
	Messages          []ChatMessage   `json:"messages"`
	MaxTokens         *int            `json:"max_tokens,omitempty"`
	Temperature       *float64        `json:"temperature,omitempty"`
	TopP              *float64        `json:"top_p,omitempty"`
	TopK              *int            `json:"top_k,omitempty"`
	Stop              []string        `json:"stop,omitempty"`
	Tools             []chatTool      `json:"tools,omitempty"`
	ToolChoice        any             `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    json.RawMessage `json:"response_format,omitempty"`
	User              string          `json:"user,omitempty"`
	Stream            bool            `json:"stream,omitempty"`
	StreamOptions     *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
}

// encode renders the request; a streamed one always asks for the usage
// chunk, which both client APIs report at the end of their streams.
func (c *chatRequest) encode() []byte {
	if c.Stream {
		c.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	b, err := json.Marshal(c)
	if err != nil {
		// Every field is a plain value or JSON that was decoded already.
		panic(fmt.Sprintf("encoding a chat request: %v", err))
	}
	return b
}

func textContent(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// contentPart is one part of a chat message's content list.
type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail,omitempty"`
	} `json:"image_url,omitempty"`
}

func imagePart(url, detail string) contentPart {
	p := contentPart{Type: "image_url"}
	p.ImageURL = &struct {
		URL    string `json:"url"`
		Detail string `json:"detail,omitempty"`
	}{url, detail}
	return p
}

// partsContent renders content parts: a plain string when they are all
// text (every engine reads that), else the list.
func partsContent(parts []contentPart) json.RawMessage {
	allText := true
	var sb strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			allText = false
			break
		}
		sb.WriteString(p.Text)
	}
	if allText {
		return textContent(sb.String())
	}
	b, _ := json.Marshal(parts)
	return b
}

// Usage is the token count of one answer.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// CachedTokens is prompt_tokens_details.cached_tokens when the engine
	// reports it.
	CachedTokens int `json:"-"`
}

type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *usageJSON) usage() *Usage {
	if u == nil {
		return nil
	}
	out := &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if out.TotalTokens == 0 {
		out.TotalTokens = out.PromptTokens + out.CompletionTokens
	}
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	return out
}

// Result is one whole answer of the engine, read from a chat completion
// or assembled from its stream.
type Result struct {
	Text      string
	ToolCalls []ChatToolCall
	// Finish is the chat finish_reason: stop, length, tool_calls, ...
	Finish string
	// StopString is the stop sequence that ended the answer, when the
	// engine says which (vLLM's stop_reason).
	StopString string
	Usage      *Usage
}

// Message is the answer as the assistant message a later turn sends back.
func (r *Result) Message() ChatMessage {
	m := ChatMessage{Role: "assistant", ToolCalls: r.ToolCalls}
	if r.Text != "" || len(r.ToolCalls) == 0 {
		m.Content = textContent(r.Text)
	}
	return m
}

// ParseChatCompletion reads the first choice of a chat.completion body.
func ParseChatCompletion(body []byte) (*Result, error) {
	var c struct {
		Choices []struct {
			Message struct {
				Content   *string        `json:"content"`
				ToolCalls []ChatToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string          `json:"finish_reason"`
			StopReason   json.RawMessage `json:"stop_reason"`
		} `json:"choices"`
		Usage *usageJSON `json:"usage"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("reading the engine's chat completion: %w", err)
	}
	if len(c.Choices) == 0 {
		return nil, fmt.Errorf("the engine's chat completion has no choices")
	}
	ch := c.Choices[0]
	r := &Result{Finish: ch.FinishReason, ToolCalls: ch.Message.ToolCalls, Usage: c.Usage.usage()}
	if ch.Message.Content != nil {
		r.Text = *ch.Message.Content
	}
	_ = json.Unmarshal(ch.StopReason, &r.StopString) // a token id is not a string
	for i := range r.ToolCalls {
		r.ToolCalls[i].Type = "function"
	}
	return r, nil
}

// Delta is what one stream chunk added to the answer.
type Delta struct {
	Text string
	// Tool is set when a chunk starts a new tool call (its index into
	// Result.ToolCalls); ToolArgs is a piece of the arguments of the call
	// ToolIndex.
	ToolStart bool
	ToolIndex int
	ToolArgs  string
}

// Accumulator assembles a streamed chat completion chunk by chunk.
type Accumulator struct {
	Result Result
	// byIndex maps a chunk's tool_calls[].index to Result.ToolCalls.
	byIndex map[int]int
	// Done is set once the engine's [DONE] arrived.
	Done bool
}

// Chunk reads one SSE data payload and returns what it added, in order.
func (a *Accumulator) Chunk(data []byte) ([]Delta, error) {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		a.Done = true
		return nil, nil
	}
	var c struct {
		Choices []struct {
			Delta struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string         `json:"finish_reason"`
			StopReason   json.RawMessage `json:"stop_reason"`
		} `json:"choices"`
		Usage *usageJSON `json:"usage"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("reading the engine's stream chunk: %w", err)
	}
	if u := c.Usage.usage(); u != nil {
		a.Result.Usage = u
	}
	var out []Delta
	for _, ch := range c.Choices {
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			a.Result.Text += *ch.Delta.Content
			out = append(out, Delta{Text: *ch.Delta.Content})
		}
		for _, tc := range ch.Delta.ToolCalls {
			if a.byIndex == nil {
				a.byIndex = map[int]int{}
			}
			i, ok := a.byIndex[tc.Index]
			if !ok {
				i = len(a.Result.ToolCalls)
				a.byIndex[tc.Index] = i
				a.Result.ToolCalls = append(a.Result.ToolCalls, newToolCall(tc.ID, tc.Function.Name, ""))
				out = append(out, Delta{ToolStart: true, ToolIndex: i})
			}
			call := &a.Result.ToolCalls[i]
			if call.ID == "" {
				call.ID = tc.ID
			}
			if call.Function.Name == "" {
				call.Function.Name = tc.Function.Name
			}
			if tc.Function.Arguments != "" {
				call.Function.Arguments += tc.Function.Arguments
				out = append(out, Delta{ToolIndex: i, ToolArgs: tc.Function.Arguments})
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.Result.Finish = *ch.FinishReason
			_ = json.Unmarshal(ch.StopReason, &a.Result.StopString)
		}
	}
	return out, nil
}

// Event is one server-sent event to send the client.
type Event struct {
	Name string
	Data []byte
}

// Bytes renders the event on the wire; an event without a name is a
// data line alone, as chat completions streams are.
func (e Event) Bytes() []byte {
	b := make([]byte, 0, len(e.Name)+len(e.Data)+16)
	if e.Name != "" {
		b = append(b, "event: "...)
		b = append(b, e.Name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, e.Data...)
	return append(b, "\n\n"...)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encoding %T: %v", v, err))
	}
	return b
}

// JSONKind names the JSON type of a value for error messages.
func JSONKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
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
