package manage

import (
	"strings"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

// TestReadToolAnswer: the verdicts of a tool check, each engine's fix.
func TestReadToolAnswer(t *testing.T) {
	llama := spec.Profile{Engine: "llamacpp"}
	llamaTemplate := spec.Profile{Engine: "llamacpp", Args: []string{"--chat-template", "chatml"}}
	vllm := spec.Profile{Engine: "vllm"}
	sglang := spec.Profile{Engine: "sglang"}
	tests := []struct {
		name    string
		p       spec.Profile
		code    int
		body    string
		verdict string
		fix     string
		detail  string
	}{
		{name: "structured", p: llama, code: 200,
			body:    `{"choices":[{"finish_reason":"tool_calls","message":{"content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}}]}`,
			verdict: ToolsStructured, detail: `get_weather({"city":"Paris"})`},
		{name: "hermes call as text on vllm", p: vllm, code: 200,
			body:    `{"choices":[{"finish_reason":"stop","message":{"content":"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}}]}`,
			verdict: ToolsText, fix: "--enable-auto-tool-choice --tool-call-parser hermes", detail: `"<tool_call>"`},
		{name: "mistral call as text on sglang", p: sglang, code: 200,
			body:    `{"choices":[{"finish_reason":"stop","message":{"content":"[TOOL_CALLS][{\"name\": \"get_weather\"}]"}}]}`,
			verdict: ToolsText, fix: "--tool-call-parser mistral"},
		{name: "llama.cpp with a template override writes the call as text", p: llamaTemplate, code: 200,
			body:    `{"choices":[{"finish_reason":"length","message":{"content":"<tool_call><tool_call>"}}]}`,
			verdict: ToolsText, fix: "--jinja without --chat-template"},
		{name: "llama.cpp without jinja refuses tools", p: llama, code: 500,
			body:    `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`,
			verdict: ToolsRefused, fix: "--jinja", detail: "the engine answered 500: tools param requires --jinja flag"},
		{name: "vllm without auto tool choice refuses", p: vllm, code: 400,
			body:    `{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","code":400}`,
			verdict: ToolsRefused, fix: "--enable-auto-tool-choice --tool-call-parser"},
		{name: "an answer without a call proves nothing", p: vllm, code: 200,
			body:    `{"choices":[{"finish_reason":"stop","message":{"content":"It is sunny."}}]}`,
			verdict: ToolsNoCall},
		{name: "not a completion", p: vllm, code: 200, body: `<html>`, verdict: ToolsNoCall, detail: "not a chat completion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readToolAnswer(tt.p, tt.code, []byte(tt.body))
			if got.GetVerdict() != tt.verdict || !strings.Contains(got.GetFix(), tt.fix) || (tt.fix == "" && got.GetFix() != "") || !strings.Contains(got.GetDetail(), tt.detail) {
				t.Errorf("verdict %q fix %q detail %q; want %q, fix with %q, detail with %q", got.GetVerdict(), got.GetFix(), got.GetDetail(), tt.verdict, tt.fix, tt.detail)
			}
		})
	}
}
