package apishape

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestResponsesToChat(t *testing.T) {
	history := []ChatMessage{{Role: "user", Content: textContent("earlier")}, {Role: "assistant", Content: textContent("yes")}}
	tests := []struct {
		name    string
		body    string
		history []ChatMessage
		want    map[string]string
		conv    int
	}{
		{
			name: "string input with instructions",
			body: `{"model":"m","instructions":"be brief","input":"hi","max_output_tokens":9}`,
			want: map[string]string{
				"messages":   `[{"content":"be brief","role":"system"},{"content":"hi","role":"user"}]`,
				"max_tokens": `9`,
			},
			conv: 1,
		},
		{
			name:    "history before the input, instructions before both and not in the conversation",
			body:    `{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"now"}]}],"previous_response_id":"resp_1"}`,
			history: history,
			want:    map[string]string{"messages": `[{"content":"i","role":"system"},{"content":"earlier","role":"user"},{"content":"yes","role":"assistant"},{"content":"now","role":"user"}]`},
			conv:    3,
		},
		{
			name: "items: developer, assistant output_text, function call and output, reasoning dropped",
			body: `{"model":"m","input":[{"type":"message","role":"developer","content":"rules"},{"role":"user","content":"weather?"},
				{"type":"reasoning","id":"rs_1","summary":[]},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"checking"}]},
				{"type":"function_call","call_id":"c1","name":"get","arguments":"{\"city\":\"Paris\"}"},
				{"type":"function_call","call_id":"c2","name":"get","arguments":"{}"},
				{"type":"function_call_output","call_id":"c1","output":"sunny"},
				{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]},
				{"role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"}]}]}`,
			want: map[string]string{"messages": `[{"content":"rules","role":"system"},{"content":"weather?","role":"user"},` +
				`{"content":"checking","role":"assistant","tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get"},"id":"c1","type":"function"},{"function":{"arguments":"{}","name":"get"},"id":"c2","type":"function"}]},` +
				`{"content":"sunny","role":"tool","tool_call_id":"c1"},{"content":"rain","role":"tool","tool_call_id":"c2"},` +
				`{"content":[{"text":"see","type":"text"},{"image_url":{"detail":"low","url":"https://x/y.png"},"type":"image_url"}],"role":"user"}]`},
			conv: 6,
		},
		{
			name: "tools, tool_choice, format, stream asks usage",
			body: `{"model":"m","input":"x","stream":true,"parallel_tool_calls":false,"tool_choice":{"type":"function","name":"get"},
				"tools":[{"type":"function","name":"get","description":"d","parameters":{"type":"object"},"strict":true}],
				"text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true}},
				"reasoning":{"effort":"low"},"include":["reasoning.encrypted_content"],"store":false}`,
			want: map[string]string{
				"tools":               `[{"function":{"description":"d","name":"get","parameters":{"type":"object"},"strict":true},"type":"function"}]`,
				"tool_choice":         `{"function":{"name":"get"},"type":"function"}`,
				"parallel_tool_calls": `false`,
				"response_format":     `{"json_schema":{"name":"out","schema":{"type":"object"},"strict":true},"type":"json_schema"}`,
				"stream_options":      `{"include_usage":true}`,
			},
			conv: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, e := ParseResponses([]byte(tt.body))
			if e != nil {
				t.Fatal(e)
			}
			body, conv, e := req.ToChat(tt.history)
			if e != nil {
				t.Fatal(e)
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			for k, want := range tt.want {
				if g := jsonString(t, got[k]); g != want {
					t.Errorf("%s:\n got %s\nwant %s", k, g, want)
				}
			}
			if len(conv) != tt.conv {
				t.Errorf("conversation of %d messages, want %d", len(conv), tt.conv)
			}
		})
	}
}

func TestResponsesRefused(t *testing.T) {
	tests := []struct{ name, body, param, msg string }{
		{"no model", `{"input":"x"}`, "model", "model"},
		{"no input", `{"model":"m"}`, "input", "input"},
		{"unknown key", `{"model":"m","input":"x","conversation":"c"}`, "conversation", "not supported"},
		{"built-in tool", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type", "only function tools"},
		{"background", `{"model":"m","input":"x","background":true}`, "background", "background"},
		{"truncation auto", `{"model":"m","input":"x","truncation":"auto"}`, "truncation", "auto"},
		{"file input", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type", "input_file"},
		{"item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type", "item_reference"},
		{"image by file id", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, "input[0].content[0]", "file_id"},
		{"bad role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role", "not one of"},
		{"tool_choice allowed_tools", `{"model":"m","input":"x","tool_choice":{"type":"allowed_tools","tools":[]}}`, "tool_choice", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, e := ParseResponses([]byte(tt.body))
			if e == nil {
				_, _, e = req.ToChat(nil)
			}
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Status != 400 || e.Param != tt.param || !strings.Contains(e.Message, tt.msg) {
				t.Fatalf("got %d %q %q; want param %q and %q", e.Status, e.Param, e.Message, tt.param, tt.msg)
			}
		})
	}
}

func TestResponseFromResult(t *testing.T) {
	req, _ := ParseResponses([]byte(`{"model":"m","input":"x","metadata":{"k":"v"}}`))
	meta := ResponseMeta{ID: "resp_abc", CreatedAt: 7, Model: "m", Stored: true}
	usage := &Usage{PromptTokens: 10, CompletionTokens: 3, TotalTokens: 13, CachedTokens: 2}
	tests := []struct {
		name       string
		res        Result
		status     string
		output     string
		incomplete any
	}{
		{"text", Result{Text: "hi", Finish: "stop"}, "completed",
			`[{"content":[{"annotations":[],"logprobs":[],"text":"hi","type":"output_text"}],"id":"msg_abc","role":"assistant","status":"completed","type":"message"}]`, nil},
		{"cut at max_output_tokens", Result{Text: "hi", Finish: "length"}, "incomplete",
			`[{"content":[{"annotations":[],"logprobs":[],"text":"hi","type":"output_text"}],"id":"msg_abc","role":"assistant","status":"incomplete","type":"message"}]`,
			map[string]any{"reason": "max_output_tokens"}},
		{"function call", Result{Finish: "tool_calls", ToolCalls: []ChatToolCall{newToolCall("c1", "get", `{}`)}}, "completed",
			`[{"arguments":"{}","call_id":"c1","id":"fc_abc_0","name":"get","status":"completed","type":"function_call"}]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.res.Usage = usage
			var o map[string]any
			if err := json.Unmarshal(req.ResponseFromResult(meta, &tt.res), &o); err != nil {
				t.Fatal(err)
			}
			if o["status"] != tt.status || o["object"] != "response" || o["id"] != "resp_abc" || o["store"] != true || jsonString(t, o["incomplete_details"]) != jsonString(t, tt.incomplete) {
				t.Errorf("response %v", o)
			}
			if g := jsonString(t, o["output"]); g != tt.output {
				t.Errorf("output %s\nwant %s", g, tt.output)
			}
			if g := jsonString(t, o["usage"]); g != `{"input_tokens":10,"input_tokens_details":{"cached_tokens":2},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13}` {
				t.Errorf("usage %s", g)
			}
			if g := jsonString(t, o["metadata"]); g != `{"k":"v"}` {
				t.Errorf("metadata %s", g)
			}
		})
	}
}

// TestResponsesStreamEvents: text then a function call, as vLLM streams
// them, give the Responses events in order with rising sequence numbers,
// and the final response holds both items.
func TestResponsesStreamEvents(t *testing.T) {
	req, _ := ParseResponses([]byte(`{"model":"m","input":"x","stream":true}`))
	s := req.NewResponsesStream(ResponseMeta{ID: "resp_abc", CreatedAt: 7, Model: "m"})
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Let"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":" me"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}`,
		`[DONE]`,
	}
	var names []string
	seq := 0
	check := func(evs []Event) {
		for _, e := range evs {
			var m map[string]any
			if err := json.Unmarshal(e.Data, &m); err != nil {
				t.Fatal(err)
			}
			if m["type"] != e.Name || m["sequence_number"] != float64(seq) {
				t.Fatalf("event %s: %s (want sequence %d)", e.Name, e.Data, seq)
			}
			seq++
			names = append(names, e.Name)
		}
	}
	for _, c := range chunks {
		evs, _, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		check(evs)
	}
	check(s.Finish())
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("events\n%v\nwant\n%v", names, want)
	}
	var final map[string]any
	if err := json.Unmarshal(s.Final(), &final); err != nil {
		t.Fatal(err)
	}
	out := jsonString(t, final["output"])
	if final["status"] != "completed" || !strings.Contains(out, `"text":"Let me"`) || !strings.Contains(out, `"call_id":"c1"`) {
		t.Fatalf("final response %s", s.Final())
	}
}

// TestResponsesStreamInterleavedCalls: however the engine interleaves two
// calls' deltas, no event touches an item after its output_item.done,
// each function_call's arguments (done event and final response) are the
// call's whole arguments.
func TestResponsesStreamInterleavedCalls(t *testing.T) {
	req, _ := ParseResponses([]byte(`{"model":"m","input":"x","stream":true}`))
	s := req.NewResponsesStream(ResponseMeta{ID: "resp_abc", CreatedAt: 7, Model: "m"})
	var evs []Event
	for _, c := range interleavedCalls {
		e, _, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e...)
	}
	evs = append(evs, s.Finish()...)
	done := map[float64]bool{}
	args := map[string]string{}
	for _, e := range evs {
		var m map[string]any
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatal(err)
		}
		i, has := m["output_index"].(float64)
		if has && done[i] {
			t.Fatalf("%s for output %v after its output_item.done: %s", e.Name, i, e.Data)
		}
		switch e.Name {
		case "response.output_item.done":
			done[i] = true
		case "response.function_call_arguments.done":
			args[m["name"].(string)] = m["arguments"].(string)
		}
	}
	if args["get"] != `{"city":"Paris"}` || args["put"] != `{"n":2}` {
		t.Fatalf("arguments done %v", args)
	}
	var final struct {
		Output []map[string]any `json:"output"`
	}
	if err := json.Unmarshal(s.Final(), &final); err != nil {
		t.Fatal(err)
	}
	var items []string
	for _, it := range final.Output {
		items = append(items, fmt.Sprint(it["type"], ":", it["name"], it["arguments"]))
	}
	if got, want := strings.Join(items, " "), `function_call:get{"city":"Paris"} function_call:put{"n":2} message:<nil> <nil>`; got != want {
		t.Fatalf("final output %s\nwant %s", got, want)
	}
}

// TestResponsesStreamEnds: a stream cut at max_output_tokens ends with
// response.incomplete and its message item incomplete (with its text);
// one the engine broke off ends with an error event and response.failed
// carrying the error.
func TestResponsesStreamEnds(t *testing.T) {
	req, _ := ParseResponses([]byte(`{"model":"m","input":"x","stream":true}`))
	run := func(chunks []string, end func(*ResponsesStream) []Event) map[string]map[string]any {
		t.Helper()
		s := req.NewResponsesStream(ResponseMeta{ID: "resp_abc", CreatedAt: 7, Model: "m"})
		var evs []Event
		for _, c := range chunks {
			e, _, err := s.Chunk([]byte(c))
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, e...)
		}
		evs = append(evs, end(s)...)
		byName := map[string]map[string]any{}
		for _, e := range evs {
			var m map[string]any
			if err := json.Unmarshal(e.Data, &m); err != nil {
				t.Fatal(err)
			}
			byName[e.Name] = m
		}
		return byName
	}
	cut := run([]string{`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`, `{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`, `[DONE]`},
		(*ResponsesStream).Finish)
	item := jsonString(t, cut["response.output_item.done"]["item"])
	final := jsonString(t, cut["response.incomplete"]["response"])
	if !strings.Contains(item, `"status":"incomplete"`) || !strings.Contains(item, `"text":"hi"`) || !strings.Contains(final, `"status":"incomplete"`) {
		t.Fatalf("cut stream: item %s\nresponse %s", item, final)
	}
	broken := run([]string{`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`},
		func(s *ResponsesStream) []Event { return s.Broken("the engine went away") })
	failed := jsonString(t, broken["response.failed"]["response"])
	if broken["error"] == nil || !strings.Contains(failed, `"status":"failed"`) || !strings.Contains(failed, `"error":{"code":"server_error","message":"the engine went away"}`) {
		t.Fatalf("broken stream: error %v\nresponse.failed %s", broken["error"], failed)
	}
}
