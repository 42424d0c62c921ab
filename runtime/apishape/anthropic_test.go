package apishape

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func chatOf(t *testing.T, body string) map[string]any {
	t.Helper()
	req, e := ParseMessages([]byte(body))
	if e != nil {
		t.Fatalf("ParseMessages: %v", e)
	}
	out, e := req.ToChat()
	if e != nil {
		t.Fatalf("ToChat: %v", e)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMessagesToChat(t *testing.T) {
	tests := []struct {
		name string
		body string
		// want maps a chat key to its expected JSON.
		want map[string]string
	}{
		{
			name: "system string and text",
			body: `{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`,
			want: map[string]string{
				"messages":   `[{"content":"be brief","role":"system"},{"content":"hi","role":"user"}]`,
				"max_tokens": `5`,
			},
		},
		{
			name: "system blocks joined, text blocks into one string",
			body: `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}],
				"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}]}`,
			want: map[string]string{"messages": `[{"content":"a\nb","role":"system"},{"content":"xy","role":"user"}]`},
		},
		{
			name: "image becomes an image_url part",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},
				{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}]}]}`,
			want: map[string]string{"messages": `[{"content":[{"text":"what?","type":"text"},{"image_url":{"url":"data:image/png;base64,AAA"},"type":"image_url"}],"role":"user"}]`},
		},
		{
			name: "tool use and result, result first then the rest of the turn",
			body: `{"model":"m","max_tokens":5,"messages":[
				{"role":"user","content":"weather?"},
				{"role":"assistant","content":[{"type":"text","text":"let me see"},{"type":"tool_use","id":"t1","name":"get","input":{"city":"Paris"}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"and?"}]},
				{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"get","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"down","is_error":true}]}]}`,
			want: map[string]string{"messages": `[{"content":"weather?","role":"user"},` +
				`{"content":"let me see","role":"assistant","tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get"},"id":"t1","type":"function"}]},` +
				`{"content":"sunny","role":"tool","tool_call_id":"t1"},{"content":"and?","role":"user"},` +
				`{"role":"assistant","tool_calls":[{"function":{"arguments":"{}","name":"get"},"id":"t2","type":"function"}]},` +
				`{"content":"Error: down","role":"tool","tool_call_id":"t2"}]`},
		},
		{
			name: "tools, tool_choice any without parallel calls, stop, user, stream asks usage",
			body: `{"model":"m","max_tokens":5,"stream":true,"stop_sequences":["END"],"metadata":{"user_id":"u1"},"top_k":3,
				"tools":[{"name":"get","description":"d","input_schema":{"type":"object"}}],
				"tool_choice":{"type":"any","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"x"}]}`,
			want: map[string]string{
				"tools":               `[{"function":{"description":"d","name":"get","parameters":{"type":"object"}},"type":"function"}]`,
				"tool_choice":         `"required"`,
				"parallel_tool_calls": `false`,
				"stop":                `["END"]`,
				"user":                `"u1"`,
				"top_k":               `3`,
				"stream":              `true`,
				"stream_options":      `{"include_usage":true}`,
			},
		},
		{
			name: "tool_choice tool names the function",
			body: `{"model":"m","max_tokens":5,"tools":[{"name":"get","input_schema":{}}],"tool_choice":{"type":"tool","name":"get"},"messages":[{"role":"user","content":"x"}]}`,
			want: map[string]string{"tool_choice": `{"function":{"name":"get"},"type":"function"}`},
		},
		{
			name: "output_config format becomes response_format",
			body: `{"model":"m","max_tokens":5,"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}},"messages":[{"role":"user","content":"x"}]}`,
			want: map[string]string{"response_format": `{"json_schema":{"name":"output","schema":{"type":"object"},"strict":true},"type":"json_schema"}`},
		},
		{
			name: "thinking asked for is ignored, thinking blocks of earlier turns dropped",
			body: `{"model":"m","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":1024},"context_management":{"edits":[]},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"y"}]},{"role":"user","content":"z"}]}`,
			want: map[string]string{"messages": `[{"content":"x","role":"user"},{"content":"y","role":"assistant"},{"content":"z","role":"user"}]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chatOf(t, tt.body)
			for k, want := range tt.want {
				if g := jsonString(t, got[k]); g != want {
					t.Errorf("%s:\n got %s\nwant %s", k, g, want)
				}
			}
		})
	}
}

func TestMessagesRefused(t *testing.T) {
	tests := []struct {
		name, body, param, msg string
	}{
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens", "field required"},
		{"no messages", `{"model":"m","max_tokens":1,"messages":[]}`, "messages", "at least one"},
		{"unknown key", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"container":"c"}`, "container", "not supported"},
		{"output format not a schema", `{"model":"m","max_tokens":1,"output_config":{"format":{"type":"regex"}},"messages":[{"role":"user","content":"x"}]}`, "output_config.format.type", "only json_schema"},
		{"server tool", `{"model":"m","max_tokens":1,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].type", "server tool"},
		{"document block", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, "messages[0].content[0].type", `"document"`},
		{"system role", `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "messages[0].role", "top-level system"},
		{"content a number", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}`, "messages[0].content", "got a number"},
		{"max_tokens a string", `{"model":"m","max_tokens":"5","messages":[{"role":"user","content":"x"}]}`, "max_tokens", "expected"},
		{"bad tool_choice", `{"model":"m","max_tokens":1,"tool_choice":{"type":"sometimes"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.type", "not one of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, e := ParseMessages([]byte(tt.body))
			if e == nil {
				_, e = req.ToChat()
			}
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Status != 400 || e.Param != tt.param || !strings.Contains(e.Message, tt.msg) {
				t.Fatalf("got %d %q %q; want param %q and a message with %q", e.Status, e.Param, e.Message, tt.param, tt.msg)
			}
		})
	}
}

func TestMessageFromResult(t *testing.T) {
	tests := []struct {
		name   string
		res    Result
		stops  []string
		reason string
		seq    any
		blocks string
	}{
		{"text", Result{Text: "hi", Finish: "stop"}, nil, "end_turn", nil, `[{"text":"hi","type":"text"}]`},
		{"length", Result{Text: "hi", Finish: "length"}, nil, "max_tokens", nil, `[{"text":"hi","type":"text"}]`},
		{"stop sequence", Result{Text: "hi", Finish: "stop", StopString: "END"}, []string{"END"}, "stop_sequence", "END", `[{"text":"hi","type":"text"}]`},
		{"tool call", Result{Finish: "tool_calls", ToolCalls: []ChatToolCall{newToolCall("c1", "get", `{"city":"Paris"}`)}}, nil, "tool_use", nil,
			`[{"id":"c1","input":{"city":"Paris"},"name":"get","type":"tool_use"}]`},
		{"arguments not an object", Result{Finish: "tool_calls", ToolCalls: []ChatToolCall{newToolCall("c1", "get", `Paris`)}}, nil, "tool_use", nil,
			`[{"id":"c1","input":{"arguments":"Paris"},"name":"get","type":"tool_use"}]`},
		{"empty", Result{Finish: "stop"}, nil, "end_turn", nil, `[]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.res.Usage = &Usage{PromptTokens: 10, CompletionTokens: 3, CachedTokens: 4}
			var m map[string]any
			if err := json.Unmarshal(MessageFromResult(&tt.res, "msg_1", "m", tt.stops), &m); err != nil {
				t.Fatal(err)
			}
			if m["stop_reason"] != tt.reason || m["stop_sequence"] != tt.seq || m["id"] != "msg_1" || m["type"] != "message" {
				t.Errorf("message %v", m)
			}
			if g := jsonString(t, m["content"]); g != tt.blocks {
				t.Errorf("content %s, want %s", g, tt.blocks)
			}
			if g := jsonString(t, m["usage"]); g != `{"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"input_tokens":6,"output_tokens":3}` {
				t.Errorf("usage %s", g)
			}
		})
	}
}

// TestMessagesStream: text then a tool call, streamed as vLLM does, give
// the events Anthropic sends, blocks numbered in order.
func TestMessagesStream(t *testing.T) {
	s := NewMessagesStream("msg_1", "m", nil)
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Let"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":" me"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}`,
		`[DONE]`,
	}
	var got []string
	for _, c := range chunks {
		evs, _, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			got = append(got, e.Name+" "+string(e.Data))
		}
	}
	for _, e := range s.Finish() {
		got = append(got, e.Name+" "+string(e.Data))
	}
	want := []string{
		`message_start {"message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}},"type":"message_start"}`,
		`content_block_start {"content_block":{"text":"","type":"text"},"index":0,"type":"content_block_start"}`,
		`content_block_delta {"delta":{"text":"Let","type":"text_delta"},"index":0,"type":"content_block_delta"}`,
		`content_block_delta {"delta":{"text":" me","type":"text_delta"},"index":0,"type":"content_block_delta"}`,
		`content_block_stop {"index":0,"type":"content_block_stop"}`,
		`content_block_start {"content_block":{"id":"c1","input":{},"name":"get","type":"tool_use"},"index":1,"type":"content_block_start"}`,
		`content_block_delta {"delta":{"partial_json":"{\"city\":","type":"input_json_delta"},"index":1,"type":"content_block_delta"}`,
		`content_block_delta {"delta":{"partial_json":"\"Paris\"}","type":"input_json_delta"},"index":1,"type":"content_block_delta"}`,
		`content_block_stop {"index":1,"type":"content_block_stop"}`,
		`message_delta {"delta":{"stop_reason":"tool_use","stop_sequence":null},"type":"message_delta","usage":{"input_tokens":7,"output_tokens":4,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}`,
		`message_stop {"type":"message_stop"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !s.Done() || s.Finish() != nil {
		t.Error("Finish twice sent events again, or [DONE] not seen")
	}
}

// interleavedCalls are two tool calls whose argument deltas the engine
// interleaves: the first call's arguments end after the second started.
var interleavedCalls = []string{
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"get","arguments":"{\"city\":"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","type":"function","function":{"name":"put","arguments":"{\"n\":"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"2}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"done"}}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	`[DONE]`,
}

// TestMessagesStreamInterleavedCalls: however the engine interleaves two
// calls' deltas, blocks go one after another (no delta outside its
// block's start and stop) and each block's input is the call's whole
// arguments.
func TestMessagesStreamInterleavedCalls(t *testing.T) {
	s := NewMessagesStream("msg_1", "m", nil)
	var evs []Event
	for _, c := range interleavedCalls {
		e, _, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e...)
	}
	evs = append(evs, s.Finish()...)
	open := -1
	inputs := map[int]string{}
	kinds := map[int]string{}
	for _, e := range evs {
		var m struct {
			Index        int            `json:"index"`
			ContentBlock map[string]any `json:"content_block"`
			Delta        struct {
				Type, PartialJSON, Text string
			} `json:"delta"`
		}
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatal(err)
		}
		var d struct {
			Delta struct {
				PartialJSON string `json:"partial_json"`
				Text        string `json:"text"`
			} `json:"delta"`
		}
		_ = json.Unmarshal(e.Data, &d)
		switch e.Name {
		case "content_block_start":
			if open >= 0 {
				t.Fatalf("block %d starts while %d is open", m.Index, open)
			}
			open = m.Index
			kinds[m.Index] = m.ContentBlock["type"].(string) + ":" + fmt.Sprint(m.ContentBlock["name"])
		case "content_block_delta":
			if m.Index != open {
				t.Fatalf("a delta for block %d while %d is open: %s", m.Index, open, e.Data)
			}
			inputs[m.Index] += d.Delta.PartialJSON + d.Delta.Text
		case "content_block_stop":
			if m.Index != open {
				t.Fatalf("stop of block %d while %d is open", m.Index, open)
			}
			open = -1
		}
	}
	got := fmt.Sprint(kinds[0], "=", inputs[0], " ", kinds[1], "=", inputs[1], " ", kinds[2], "=", inputs[2])
	if want := `tool_use:get={"city":"Paris"} tool_use:put={"n":2} text:<nil>=done`; got != want {
		t.Fatalf("blocks %s\nwant   %s", got, want)
	}
}
