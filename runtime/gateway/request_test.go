package gateway

import (
	"encoding/json"
	"testing"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name         string
		body         string
		wantStatus   int // 0: parses
		wantCode     string
		model        string
		stream       bool
		includeUsage bool
		maxTokens    int
		n            int
		bestOf       int
		prompts      int
		tokenIDs     bool
	}{
		{name: "minimal", body: `{"model":"m"}`, model: "m"},
		{name: "all fields", body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":7,"n":2}`,
			model: "m", stream: true, includeUsage: true, maxTokens: 7, n: 2},
		{name: "max_completion_tokens wins before max_tokens", body: `{"max_completion_tokens":9,"max_tokens":3,"model":"m"}`,
			model: "m", maxTokens: 9},
		{name: "max_completion_tokens wins after max_tokens", body: `{"max_tokens":3,"max_completion_tokens":9,"model":"m"}`,
			model: "m", maxTokens: 9},
		{name: "nulls are unset", body: `{"model":"m","stream":null,"stream_options":null,"max_tokens":null}`, model: "m"},
		{name: "max_tokens when max_completion_tokens is 0", body: `{"max_completion_tokens":0,"max_tokens":3,"model":"m"}`,
			model: "m", maxTokens: 3},
		{name: "n_predict (llama.cpp)", body: `{"model":"m","n_predict":5}`, model: "m", maxTokens: 5},
		{name: "escaped key is the key", body: `{"model":"m","max\u005ftokens":4}`, model: "m", maxTokens: 4},
		// Duplicates of a key the gateway reads are refused: the engine
		// keeps the last, and the gateway would count something else.
		{name: "duplicate model", body: `{"model":"a","model":"b"}`, wantStatus: 400, wantCode: "duplicate_key"},
		{name: "duplicate max_tokens", body: `{"model":"m","max_tokens":1,"max_tokens":200}`, wantStatus: 400, wantCode: "duplicate_key"},
		{name: "duplicate max_tokens then null", body: `{"model":"m","max_tokens":1,"max_tokens":null}`, wantStatus: 400, wantCode: "duplicate_key"},
		{name: "duplicate by escape", body: `{"model":"m","max_tokens":1,"max\u005ftokens":200}`, wantStatus: 400, wantCode: "duplicate_key"},
		{name: "duplicate stream", body: `{"model":"m","stream":false,"stream":true}`, wantStatus: 400, wantCode: "duplicate_key"},
		{name: "duplicate n", body: `{"model":"m","n":1,"n":5}`, wantStatus: 400, wantCode: "duplicate_key"},
		{name: "duplicate prompt", body: `{"model":"m","prompt":"a","prompt":["a","b"]}`, wantStatus: 400, wantCode: "duplicate_key"},
		{name: "duplicate of a key not read", body: `{"model":"m","temperature":1,"temperature":0}`, model: "m"},
		{name: "a read key in another case", body: `{"model":"m","MAX_TOKENS":9}`, wantStatus: 400, wantCode: "unknown_parameter"},
		{name: "a read key with a Kelvin sign", body: "{\"model\":\"m\",\"max_to\u212Aens\":9}", wantStatus: 400, wantCode: "unknown_parameter"},
		{name: "a read key in another case before it", body: `{"Model":"x","model":"m"}`, wantStatus: 400, wantCode: "unknown_parameter"},
		{name: "nested model ignored", body: `{"messages":[{"model":"x"}],"model":"m"}`, model: "m"},
		{name: "whitespace", body: " \n{ \"model\" :\t\"m\" , \"stream\" : true }\n", model: "m", stream: true},
		{name: "malformed", body: `{"model":"m"`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "not an object", body: `["model"]`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "empty body", body: ``, wantStatus: 400, wantCode: "invalid_json"},
		{name: "trailing data", body: `{"model":"m"} {}`, wantStatus: 400, wantCode: "invalid_json"},
		{name: "missing model", body: `{"messages":[]}`, wantStatus: 400, wantCode: "missing_model"},
		{name: "empty model", body: `{"model":""}`, wantStatus: 400, wantCode: "missing_model"},
		{name: "model not a string", body: `{"model":3}`, wantStatus: 400, wantCode: "invalid_type"},
		{name: "stream not a bool", body: `{"model":"m","stream":"yes"}`, wantStatus: 400, wantCode: "invalid_type"},
		{name: "max_tokens not an int", body: `{"model":"m","max_tokens":1.5}`, wantStatus: 400, wantCode: "invalid_type"},
		// Bounds: a huge or negative count must never reach the arithmetic
		// of admission (an overflow would reserve a negative worst case).
		{name: "max_tokens at int64 max", body: `{"model":"m","max_tokens":9223372036854775807}`, wantStatus: 400, wantCode: "invalid_value"},
		{name: "max_tokens beyond int64", body: `{"model":"m","max_tokens":99999999999999999999}`, wantStatus: 400, wantCode: "invalid_type"},
		{name: "max_tokens too large", body: `{"model":"m","max_tokens":16777217}`, wantStatus: 400, wantCode: "invalid_value"},
		{name: "max_tokens negative", body: `{"model":"m","max_tokens":-5}`, wantStatus: 400, wantCode: "invalid_value"},
		{name: "n too large", body: `{"model":"m","n":129}`, wantStatus: 400, wantCode: "invalid_value"},
		{name: "best_of negative", body: `{"model":"m","best_of":-1}`, wantStatus: 400, wantCode: "invalid_value"},
		{name: "prompt string", body: `{"model":"m","prompt":"hi","best_of":3}`, model: "m", prompts: 1, bestOf: 3},
		{name: "prompt list", body: `{"model":"m","prompt":["a","b","c"]}`, model: "m", prompts: 3},
		{name: "prompt token ids", body: `{"model":"m","prompt":[1,2,3]}`, model: "m", prompts: 1, tokenIDs: true},
		{name: "prompt token id lists", body: `{"model":"m","prompt":[[1,2],[3]]}`, model: "m", prompts: 2, tokenIDs: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, aerr := parseRequest([]byte(tt.body))
			if tt.wantStatus != 0 {
				if aerr == nil {
					t.Fatalf("parsed %+v, want error %d", req, tt.wantStatus)
				}
				if aerr.status != tt.wantStatus || aerr.Code == nil || *aerr.Code != tt.wantCode {
					t.Fatalf("error %d %v, want %d %s", aerr.status, aerr.Code, tt.wantStatus, tt.wantCode)
				}
				return
			}
			if aerr != nil {
				t.Fatalf("unexpected error: %s", aerr.Message)
			}
			if req.model != tt.model || req.stream != tt.stream || req.includeUsage != tt.includeUsage ||
				req.maxTokens != tt.maxTokens || req.n != tt.n || req.bestOf != tt.bestOf || req.tokenIDs != tt.tokenIDs ||
				(tt.prompts != 0 && req.prompts != tt.prompts) {
				t.Errorf("got model=%q stream=%v includeUsage=%v maxTokens=%d n=%d", req.model, req.stream,
					req.includeUsage, req.maxTokens, req.n)
			}
		})
	}
}

func TestRewrite(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		canonical string
		inject    bool
		maxTokens int
		want      string
	}{
		{name: "nothing to do returns the same bytes", body: `{"model": "m",  "x":1}`, canonical: "m",
			want: `{"model": "m",  "x":1}`},
		{name: "alias replaced in place", body: "{ \"model\" : \"coder\" ,\"messages\":[{\"role\":\"user\",\"content\":\"model: coder\"}]}",
			canonical: "qwen/coder-3b", want: "{ \"model\" : \"qwen/coder-3b\" ,\"messages\":[{\"role\":\"user\",\"content\":\"model: coder\"}]}"},
		{name: "nested model kept", body: `{"model":"a","x":{"model":"a"}}`, canonical: "c",
			want: `{"model":"c","x":{"model":"a"}}`},
		{name: "bound added", body: `{"model":"m"}`, canonical: "m", maxTokens: 50,
			want: `{"max_tokens":50,"model":"m"}`},
		{name: "bound added beside usage", body: `{"model":"m"}`, canonical: "m", inject: true, maxTokens: 50,
			want: `{"max_tokens":50,"stream_options":{"include_usage":true},"model":"m"}`},
		{name: "every bound set", body: `{"model":"m","max_tokens":null,"max_completion_tokens":0,"n_predict":9}`, canonical: "m", maxTokens: 50,
			want: `{"model":"m","max_tokens":50,"max_completion_tokens":50,"n_predict":50}`},
		{name: "max_tokens beside another bound", body: `{"model":"m","n_predict":9}`, canonical: "m", maxTokens: 9,
			want: `{"max_tokens":9,"model":"m","n_predict":9}`},
		{name: "escaped bound set", body: `{"model":"m","max\u005ftokens":7}`, canonical: "m", maxTokens: 7,
			want: `{"model":"m","max\u005ftokens":7}`},
		{name: "no bound leaves the client's", body: `{"model":"m","max_tokens":7}`, canonical: "m",
			want: `{"model":"m","max_tokens":7}`},
		{name: "escaped alias", body: `{"model":"c\u006fder"}`, canonical: "m", want: `{"model":"m"}`},
		{name: "canonical needing escapes", body: `{"model":"a"}`, canonical: `q"x`, want: `{"model":"q\"x"}`},
		{name: "usage injected", body: `{"model":"m","stream":true}`, canonical: "m", inject: true,
			want: `{"stream_options":{"include_usage":true},"model":"m","stream":true}`},
		{name: "usage merged into options", body: `{"model":"a","stream_options":{"include_usage":false,"continuous_usage_stats":false},"stream":true}`,
			canonical: "m", inject: true,
			want: `{"model":"m","stream_options":{"continuous_usage_stats":false,"include_usage":true},"stream":true}`},
		{name: "null options replaced", body: `{"model":"m","stream_options":null}`, canonical: "m", inject: true,
			want: `{"model":"m","stream_options":{"include_usage":true}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, aerr := parseRequest([]byte(tt.body))
			if aerr != nil {
				t.Fatalf("parse: %s", aerr.Message)
			}
			got, err := req.rewrite([]byte(tt.body), tt.canonical, tt.inject, tt.maxTokens)
			if err != nil {
				t.Fatalf("rewrite: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("rewrite =\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("rewritten body is not valid JSON: %s", got)
			}
		})
	}
}

func TestEventUsage(t *testing.T) {
	tests := []struct {
		name      string
		event     string
		wantUsage bool
		usageOnly bool
		prompt    int
	}{
		{name: "content chunk", event: "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"},
		{name: "null usage", event: "data: {\"choices\":[{}],\"usage\": null}\n\n"},
		{name: "usage only", event: "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n",
			wantUsage: true, usageOnly: true, prompt: 4},
		{name: "usage with choices", event: "data:{\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5}}\r\n\r\n",
			wantUsage: true, prompt: 5},
		{name: "done", event: "data: [DONE]\n\n"},
		{name: "usage inside content is escaped", event: "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\": {}\"}}]}\n\n"},
		{name: "comment line", event: ": ping \"usage\"\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, only := eventUsage([]byte(tt.event))
			if (u != nil) != tt.wantUsage || only != tt.usageOnly {
				t.Fatalf("usage=%+v usageOnly=%v, want usage %v usageOnly %v", u, only, tt.wantUsage, tt.usageOnly)
			}
			if u != nil && u.PromptTokens != tt.prompt {
				t.Errorf("prompt tokens %d, want %d", u.PromptTokens, tt.prompt)
			}
		})
	}
}

func TestTailUsage(t *testing.T) {
	tb := &tailBuffer{max: 64}
	write := func(p string) {
		t.Helper()
		if n, err := tb.Write([]byte(p)); err != nil || n != len(p) {
			t.Fatalf("tailBuffer.Write(%d bytes) = %d, %v; want %d, nil", len(p), n, err, len(p))
		}
	}
	for i := 0; i < 100; i++ {
		write(`0.125,`)
	}
	write(`0.5]}],"usage":{"prompt_tokens":12,"total_tokens":12}}`)
	if len(tb.b) != 64 {
		t.Fatalf("tail holds %d bytes, want 64", len(tb.b))
	}
	u := tailUsage(tb.b)
	if !u.Reported || u.PromptTokens != 12 || u.TotalTokens != 12 {
		t.Errorf("tail usage = %+v, want 12 prompt and total tokens", u)
	}
	if u := tailUsage([]byte(`0.1,0.2]}]}`)); u.Reported {
		t.Errorf("usage found in a tail without one: %+v", u)
	}
}
