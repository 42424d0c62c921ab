package apishape

// MessagesStream turns a streamed chat completion into the Messages API's
// events: message_start, then for each content block (text, or one per
// tool call) content_block_start, its content_block_delta events and
// content_block_stop, then message_delta with the stop reason and the
// usage, and message_stop.
//
// Blocks go one after another, as Anthropic sends them, however the
// engine interleaves its deltas: the first tool call streams as it comes
// and stays open to the end (its arguments may arrive after another
// call's); further tool calls, and text after a tool call, are kept and
// sent whole, each its own block, when the stream ends.
type MessagesStream struct {
	id, model string
	stops     []string
	acc       Accumulator
	started   bool
	// open is the Messages index of the block being streamed, -1 when
	// none; next the index of the next block.
	open, next int
	// live is the tool call streamed as it comes (-1: none yet); queued
	// the later ones and text the text after a tool call, sent at the end.
	live     int
	queued   []int
	text     string
	finished bool
}

// NewMessagesStream starts the translation of one stream.
func NewMessagesStream(id, model string, stops []string) *MessagesStream {
	return &MessagesStream{id: id, model: model, stops: stops, open: -1, live: -1}
}

// Result is the answer streamed so far.
func (s *MessagesStream) Result() *Result { return &s.acc.Result }

// Done reports whether the engine's stream ended with [DONE].
func (s *MessagesStream) Done() bool { return s.acc.Done }

func (s *MessagesStream) start() []Event {
	if s.started {
		return nil
	}
	s.started = true
	msg := anthropicMessage{ID: s.id, Type: "message", Role: "assistant", Model: s.model, Content: []map[string]any{}}
	return []Event{{"message_start", mustJSON(map[string]any{"type": "message_start", "message": msg})}}
}

func (s *MessagesStream) closeBlock() []Event {
	if s.open < 0 {
		return nil
	}
	ev := Event{"content_block_stop", mustJSON(map[string]any{"type": "content_block_stop", "index": s.open})}
	s.open = -1
	return []Event{ev}
}

func (s *MessagesStream) openBlock(block map[string]any) []Event {
	out := s.closeBlock()
	s.open = s.next
	s.next++
	return append(out, Event{"content_block_start", mustJSON(map[string]any{"type": "content_block_start", "index": s.open, "content_block": block})})
}

func toolUseBlock(tc ChatToolCall) map[string]any {
	return map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": map[string]any{}}
}

func blockDelta(index int, delta map[string]any) Event {
	return Event{"content_block_delta", mustJSON(map[string]any{"type": "content_block_delta", "index": index, "delta": delta})}
}

// Chunk translates one data payload of the engine's stream; content
// reports whether it carried generated output.
func (s *MessagesStream) Chunk(data []byte) (_ []Event, content bool, _ error) {
	deltas, err := s.acc.Chunk(data)
	if err != nil {
		return nil, false, err
	}
	var out []Event
	if !s.acc.Done {
		out = s.start()
	}
	for _, d := range deltas {
		switch {
		case d.Text != "" && s.live >= 0:
			s.text += d.Text
		case d.Text != "":
			if s.open < 0 {
				out = append(out, s.openBlock(map[string]any{"type": "text", "text": ""})...)
			}
			out = append(out, blockDelta(s.open, map[string]any{"type": "text_delta", "text": d.Text}))
		case d.ToolStart && s.live >= 0:
			s.queued = append(s.queued, d.ToolIndex)
		case d.ToolStart:
			s.live = d.ToolIndex
			out = append(out, s.openBlock(toolUseBlock(s.acc.Result.ToolCalls[d.ToolIndex]))...)
		case d.ToolArgs != "" && d.ToolIndex == s.live:
			out = append(out, blockDelta(s.open, map[string]any{"type": "input_json_delta", "partial_json": d.ToolArgs}))
		}
	}
	return out, len(deltas) > 0, nil
}

// Finish ends the stream: the open block is closed, the blocks kept are
// sent, and the message ends with its stop reason and usage. It returns
// nothing when called again.
func (s *MessagesStream) Finish() []Event {
	if s.finished {
		return nil
	}
	s.finished = true
	out := s.start()
	out = append(out, s.closeBlock()...)
	for _, i := range s.queued {
		tc := s.acc.Result.ToolCalls[i]
		out = append(out, s.openBlock(toolUseBlock(tc))...)
		if tc.Function.Arguments != "" {
			out = append(out, blockDelta(s.open, map[string]any{"type": "input_json_delta", "partial_json": tc.Function.Arguments}))
		}
		out = append(out, s.closeBlock()...)
	}
	if s.text != "" {
		out = append(out, s.openBlock(map[string]any{"type": "text", "text": ""})...)
		out = append(out, blockDelta(s.open, map[string]any{"type": "text_delta", "text": s.text}))
		out = append(out, s.closeBlock()...)
	}
	reason, seq := stopReason(&s.acc.Result, s.stops)
	u := anthropicUsage(s.acc.Result.Usage)
	out = append(out,
		Event{"message_delta", mustJSON(map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq}, "usage": u})},
		Event{"message_stop", []byte(`{"type":"message_stop"}`)})
	return out
}

// AnthropicErrorType is the Messages API's error type for an HTTP status.
func AnthropicErrorType(status int) string {
	switch status {
	case 400, 422:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 408:
		return "timeout_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	}
	return "api_error"
}

// AnthropicError renders an error body in the Messages API's shape.
func AnthropicError(status int, message, requestID string) []byte {
	body := map[string]any{"type": "error", "error": map[string]string{"type": AnthropicErrorType(status), "message": message}}
	if requestID != "" {
		body["request_id"] = requestID
	}
	return mustJSON(body)
}

// ErrorEvent is the event a stream ends with when it fails midway.
func ErrorEvent(status int, message string) Event {
	return Event{"error", mustJSON(map[string]any{"type": "error", "error": map[string]string{"type": AnthropicErrorType(status), "message": message}})}
}
