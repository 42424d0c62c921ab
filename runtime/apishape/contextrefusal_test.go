package apishape

import "testing"

// TestParseContextRefusal reads the engines' context-length refusals as
// their servers write them, and nothing else.
func TestParseContextRefusal(t *testing.T) {
	tests := []struct {
		name string
		body string
		want ContextRefusal
		ok   bool
	}{
		{"vLLM 0.10+ input", `{"error":{"message":"This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}`,
			ContextRefusal{4096, 5000}, true},
		{"vLLM 0.10+ max_tokens", `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 800. This model's maximum context length is 4096 tokens and your request has 3500 input tokens (800 > 4096 - 3500). None","type":"BadRequestError","param":null,"code":400}}`,
			ContextRefusal{4096, 3500}, true},
		{"vLLM before 0.10", `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4200 in the messages, 800 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`,
			ContextRefusal{4096, 4200}, true},
		{"vLLM before 0.10 messages only", `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","param":null,"code":400}`,
			ContextRefusal{4096, 5000}, true},
		{"vLLM limit only", `{"object":"error","message":"This model's maximum context length is 8192 tokens","type":"BadRequestError","param":null,"code":400}`,
			ContextRefusal{8192, 0}, true},
		{"llama-server", `{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}`,
			ContextRefusal{4096, 4476}, true},
		{"llama-server older", `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`,
			ContextRefusal{}, true},
		{"SGLang input", `{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}`,
			ContextRefusal{4096, 5000}, true},
		{"SGLang total", `{"object":"error","message":"Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 5000 tokens: 4200 tokens from the input messages and 800 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}`,
			ContextRefusal{4096, 4200}, true},
		{"OpenAI code", `{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			ContextRefusal{}, true},
		{"another refusal", `{"error":{"message":"max_tokens must be at least 1, got 0","type":"BadRequestError","param":null,"code":400}}`,
			ContextRefusal{}, false},
		{"not JSON", `Bad Request`, ContextRefusal{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseContextRefusal([]byte(tt.body))
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
