package apishape

// ResponsesStream turns a streamed chat completion into the Responses
// API's events: response.created and response.in_progress; for text a
// message item (response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done); for each tool
// call a function_call item (response.output_item.added,
// response.function_call_arguments.delta..., .done,
// response.output_item.done); then response.completed (or
// response.incomplete) with the whole response. Every event carries its
// sequence_number.
//
// Items go one after another however the engine interleaves its deltas:
// the first tool call streams as it comes and stays open to the end (its
// arguments may arrive after another call's); further tool calls, and
// text after a tool call, are kept and sent whole, each its own item,
// when the stream ends. Every item's final form is built from the whole
// answer.
type ResponsesStream struct {
	req     *ResponsesRequest
	meta    ResponseMeta
	acc     Accumulator
	seq     int
	started bool
	// output holds the items opened so far; open is the index of the one
	// being streamed (-1: none), openTool the tool call it is (-1: text).
	output   []map[string]any
	open     int
	openTool int
	text     string
	// live is the tool call streamed as it comes (-1: none yet); queued
	// the later ones and after the text after a tool call, sent at the
	// end.
	live     int
	queued   []int
	after    string
	finished bool
	final    []byte
}

// NewResponsesStream starts the translation of one stream.
func (req *ResponsesRequest) NewResponsesStream(meta ResponseMeta) *ResponsesStream {
	return &ResponsesStream{req: req, meta: meta, open: -1, openTool: -1, live: -1}
}

// Result is the answer streamed so far.
func (s *ResponsesStream) Result() *Result { return &s.acc.Result }

// Done reports whether the engine's stream ended with [DONE].
func (s *ResponsesStream) Done() bool { return s.acc.Done }

// Final is the whole response object once Finish ran.
func (s *ResponsesStream) Final() []byte { return s.final }

func (s *ResponsesStream) event(name string, fields map[string]any) Event {
	fields["type"] = name
	fields["sequence_number"] = s.seq
	s.seq++
	return Event{name, mustJSON(fields)}
}

func (s *ResponsesStream) start() []Event {
	if s.started {
		return nil
	}
	s.started = true
	o := s.req.object(s.meta, "in_progress", nil, nil, nil)
	return []Event{
		s.event("response.created", map[string]any{"response": o}),
		s.event("response.in_progress", map[string]any{"response": o}),
	}
}

// closeItem ends the item being streamed; a message item is left with
// status (completed, or incomplete for an answer cut short).
func (s *ResponsesStream) closeItem(status string) []Event {
	if s.open < 0 {
		return nil
	}
	i := s.open
	item := s.output[i]
	id := item["id"].(string)
	var out []Event
	if s.openTool < 0 {
		out = append(out,
			s.event("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": s.text, "logprobs": []any{}}),
			s.event("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "part": outputTextPart(s.text)}))
		s.output[i] = messageItem(id, s.text, status)
	} else {
		tc := s.acc.Result.ToolCalls[s.openTool]
		out = append(out, s.event("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i,
			"name": tc.Function.Name, "arguments": tc.Function.Arguments}))
		s.output[i] = callItem(id, tc, "completed")
	}
	out = append(out, s.event("response.output_item.done", map[string]any{"output_index": i, "item": s.output[i]}))
	s.open, s.openTool = -1, -1
	return out
}

// openText opens a message item.
func (s *ResponsesStream) openText() []Event {
	s.open, s.openTool, s.text = len(s.output), -1, ""
	id := itemID(s.meta.ID, "msg_", -1)
	if s.open > 0 {
		id = itemID(s.meta.ID, "msg_", s.open)
	}
	s.output = append(s.output, messageItem(id, "", "in_progress"))
	return []Event{
		s.event("response.output_item.added", map[string]any{"output_index": s.open, "item": s.output[s.open]}),
		s.event("response.content_part.added", map[string]any{"item_id": id, "output_index": s.open, "content_index": 0,
			"part": outputTextPart("")}),
	}
}

// textDelta adds text to the open message item.
func (s *ResponsesStream) textDelta(text string) Event {
	s.text += text
	return s.event("response.output_text.delta", map[string]any{"item_id": s.output[s.open]["id"],
		"output_index": s.open, "content_index": 0, "delta": text, "logprobs": []any{}})
}

// openCall opens a function_call item for tool call i.
func (s *ResponsesStream) openCall(i int) []Event {
	s.open, s.openTool = len(s.output), i
	item := callItem(itemID(s.meta.ID, "fc_", i), s.acc.Result.ToolCalls[i], "in_progress")
	item["arguments"] = ""
	s.output = append(s.output, item)
	return []Event{s.event("response.output_item.added", map[string]any{"output_index": s.open, "item": item})}
}

// argsDelta adds arguments to the open function_call item.
func (s *ResponsesStream) argsDelta(args string) Event {
	return s.event("response.function_call_arguments.delta", map[string]any{
		"item_id": s.output[s.open]["id"], "output_index": s.open, "delta": args})
}

// Chunk translates one data payload of the engine's stream; content
// reports whether it carried generated output.
func (s *ResponsesStream) Chunk(data []byte) (_ []Event, content bool, _ error) {
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
			s.after += d.Text
		case d.Text != "":
			if s.open < 0 {
				out = append(out, s.openText()...)
			}
			out = append(out, s.textDelta(d.Text))
		case d.ToolStart && s.live >= 0:
			s.queued = append(s.queued, d.ToolIndex)
		case d.ToolStart:
			s.live = d.ToolIndex
			out = append(out, s.closeItem("completed")...)
			out = append(out, s.openCall(d.ToolIndex)...)
		case d.ToolArgs != "" && d.ToolIndex == s.live:
			out = append(out, s.argsDelta(d.ToolArgs))
		}
	}
	return out, len(deltas) > 0, nil
}

// Finish ends the stream: the open item is closed, the items kept are
// sent, and the whole response is sent with response.completed, or
// response.incomplete when the answer was cut at max_output_tokens.
func (s *ResponsesStream) Finish() []Event {
	if s.finished {
		return nil
	}
	s.finished = true
	status, incomplete := finishStatus(s.acc.Result.Finish)
	itemStatus := itemStatus(s.acc.Result.Finish)
	out := s.start()
	out = append(out, s.closeItem(itemStatus)...)
	for _, i := range s.queued {
		out = append(out, s.openCall(i)...)
		if args := s.acc.Result.ToolCalls[i].Function.Arguments; args != "" {
			out = append(out, s.argsDelta(args))
		}
		out = append(out, s.closeItem(itemStatus)...)
	}
	if s.after != "" {
		out = append(out, s.openText()...)
		out = append(out, s.textDelta(s.after))
		out = append(out, s.closeItem(itemStatus)...)
	}
	if len(s.output) == 0 {
		s.output = append(s.output, messageItem(itemID(s.meta.ID, "msg_", -1), "", itemStatus))
	}
	o := s.req.object(s.meta, status, s.output, s.acc.Result.Usage, incomplete)
	s.final = mustJSON(o)
	name := "response.completed"
	if status == "incomplete" {
		name = "response.incomplete"
	}
	return append(out, s.event(name, map[string]any{"response": o}))
}

// ErrorEvent is an error event of the stream that leaves it open: a
// stream that is whole all the same ends with Finish after it.
func (s *ResponsesStream) ErrorEvent(code, message string) Event {
	return s.event("error", map[string]any{"code": code, "message": message, "param": nil})
}

// Broken ends a stream the engine broke off: an error event, then
// response.failed with the response as it stood and the error.
func (s *ResponsesStream) Broken(message string) []Event {
	if s.finished {
		return nil
	}
	s.finished = true
	out := s.start()
	out = append(out, s.ErrorEvent("server_error", message))
	o := s.req.object(s.meta, "failed", s.output, s.acc.Result.Usage, nil)
	o.Error = map[string]string{"code": "server_error", "message": message}
	return append(out, s.event("response.failed", map[string]any{"response": o}))
}
