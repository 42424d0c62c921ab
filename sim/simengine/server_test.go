package simengine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestErrorBodies(t *testing.T) {
	_, srv := newTestServer(t, Config{MaxModelLen: 10})
	tests := []struct {
		name       string
		path       string
		body       any
		wantStatus int
		wantParam  any // nil for a null param
		wantCode   any // nil for a null code
	}{
		{name: "chat unknown model", path: "/v1/chat/completions", body: map[string]any{"model": "nope", "messages": []map[string]string{{"role": "user", "content": "x"}}}, wantStatus: 404, wantParam: "model", wantCode: "model_not_found"},
		{name: "completions unknown model", path: "/v1/completions", body: map[string]any{"model": "nope", "prompt": "x"}, wantStatus: 404, wantParam: "model", wantCode: "model_not_found"},
		{name: "embeddings unknown model", path: "/v1/embeddings", body: map[string]any{"model": "nope", "input": "x"}, wantStatus: 404, wantParam: "model", wantCode: "model_not_found"},
		{name: "chat malformed", path: "/v1/chat/completions", body: `{"model": `, wantStatus: 400},
		{name: "chat wrong type", path: "/v1/chat/completions", body: `{"model": "sim-model", "messages": "hi"}`, wantStatus: 400, wantParam: "messages", wantCode: "invalid_type"},
		{name: "completions malformed", path: "/v1/completions", body: `not json`, wantStatus: 400},
		{name: "embeddings empty body", path: "/v1/embeddings", body: ``, wantStatus: 400},
		{name: "chat no messages", path: "/v1/chat/completions", body: map[string]any{"model": testModel, "messages": []any{}}, wantStatus: 400, wantParam: "messages"},
		{name: "chat max_tokens zero", path: "/v1/chat/completions", body: map[string]any{"model": testModel, "max_tokens": 0, "messages": []map[string]string{{"role": "user", "content": "x"}}}, wantStatus: 400, wantParam: "max_tokens"},
		{name: "chat n two", path: "/v1/chat/completions", body: map[string]any{"model": testModel, "n": 2, "messages": []map[string]string{{"role": "user", "content": "x"}}}, wantStatus: 400, wantParam: "n"},
		{name: "chat unknown named tool", path: "/v1/chat/completions", body: map[string]any{"model": testModel, "tools": weatherTools, "tool_choice": map[string]any{"type": "function", "function": map[string]string{"name": "nope"}}, "messages": []map[string]string{{"role": "user", "content": "x"}}}, wantStatus: 400, wantParam: "tool_choice"},
		{name: "completions no prompt", path: "/v1/completions", body: map[string]any{"model": testModel}, wantStatus: 400, wantParam: "prompt"},
		{name: "embeddings empty array", path: "/v1/embeddings", body: map[string]any{"model": testModel, "input": []string{}}, wantStatus: 400, wantParam: "input"},
		{name: "embeddings bad format", path: "/v1/embeddings", body: map[string]any{"model": testModel, "input": "x", "encoding_format": "hex"}, wantStatus: 400, wantParam: "encoding_format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, raw := post(t, srv.URL+tt.path, tt.body)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tt.wantStatus, raw)
			}
			var body map[string]map[string]any
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("error body %s: %v", raw, err)
			}
			e, ok := body["error"]
			if !ok || len(body) != 1 {
				t.Fatalf("body %s, want only an error object", raw)
			}
			for _, key := range []string{"message", "type", "param", "code"} {
				if _, ok := e[key]; !ok {
					t.Fatalf("error lacks %q: %s", key, raw)
				}
			}
			if msg, _ := e["message"].(string); msg == "" || e["type"] != "invalid_request_error" {
				t.Fatalf("error message/type wrong: %s", raw)
			}
			if e["param"] != tt.wantParam || e["code"] != tt.wantCode {
				t.Fatalf("param %v code %v, want %v %v: %s", e["param"], e["code"], tt.wantParam, tt.wantCode, raw)
			}
		})
	}
}

// TestContextLengthRefusalIsVLLMs: a prompt longer than the context is
// refused with vLLM's words and body, which the gateway reads to fit a
// thread again.
func TestContextLengthRefusalIsVLLMs(t *testing.T) {
	_, srv := newTestServer(t, Config{MaxModelLen: 8})
	for _, tt := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"` + testModel + `","messages":[{"role":"user","content":"1 2 3 4 5 6 7 8 9 10"}]}`},
		{"/v1/completions", `{"model":"` + testModel + `","prompt":"1 2 3 4 5 6 7 8 9 10"}`},
	} {
		status, raw := post(t, srv.URL+tt.path, tt.body)
		const want = `{"error":{"code":400,"message":"This model's maximum context length is 8 tokens. However, your request has 10 input tokens. Please reduce the length of the input messages.","param":null,"type":"BadRequestError"}}`
		if status != 400 || strings.TrimSpace(string(raw)) != want {
			t.Fatalf("%s: %d %s, want 400 %s", tt.path, status, raw, want)
		}
	}
}

// TestWrongTypesNameJSONTypes: a field of the wrong JSON type (a messages
// that is a string) is answered with OpenAI's error body naming the field,
// the JSON type it must be and the one it got, never a Go type.
func TestWrongTypesNameJSONTypes(t *testing.T) {
	_, srv := newTestServer(t, Config{MaxModelLen: 100})
	const chat, completions, embeddings = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
	const hi = `[{"role":"user","content":"hi"}]`
	tests := []struct {
		path, body, want, param string
	}{
		{chat, `{"model":"sim-model","messages":"hi"}`, "messages must be an array, got a string", "messages"},
		{chat, `{"model":"sim-model","messages":{"role":"user"}}`, "messages must be an array, got an object", "messages"},
		{chat, `{"model":"sim-model","messages":["hi"]}`, "messages[] must be an object, got a string", "messages"},
		{chat, `{"model":"sim-model","messages":[{"role":1,"content":"hi"}]}`, "messages[].role must be a string, got a number", "messages.role"},
		{chat, `{"model":"sim-model","messages":[{"role":"user","content":[1]}]}`, "messages[0].content[0] must be an object, got a number", "messages[0].content"},
		{chat, `{"model":"sim-model","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, "messages[0].content[0].text must be a string, got a number", "messages[0].content"},
		{chat, `{"model":5,"messages":` + hi + `}`, "model must be a string, got a number", "model"},
		{chat, `{"model":"sim-model","max_tokens":"5","messages":` + hi + `}`, "max_tokens must be an integer, got a string", "max_tokens"},
		{chat, `{"model":"sim-model","max_tokens":1.5,"messages":` + hi + `}`, "max_tokens must be an integer, got 1.5", "max_tokens"},
		{chat, `{"model":"sim-model","stream":"yes","messages":` + hi + `}`, "stream must be a boolean, got a string", "stream"},
		{chat, `{"model":"sim-model","stream_options":{"include_usage":"x"},"messages":` + hi + `}`, "stream_options.include_usage must be a boolean, got a string", "stream_options.include_usage"},
		{chat, `{"model":"sim-model","tools":{},"messages":` + hi + `}`, "tools must be an array, got an object", "tools"},
		{chat, `{"model":"sim-model","tools":[{"function":"f"}],"messages":` + hi + `}`, "tools[].function must be an object, got a string", "tools.function"},
		{chat, `{"model":"sim-model","tool_choice":5,"messages":` + hi + `}`, "tool_choice must be a string or an object, got 5", "tool_choice"},
		{chat, `{"model":"sim-model","tool_choice":{"function":"f"},"messages":` + hi + `}`, "tool_choice.function must be an object, got a string", "tool_choice"},
		{chat, `[{"role":"user","content":"hi"}]`, "the request body must be an object, got an array", ""},
		{completions, `{"model":"sim-model","prompt":"x","n":"1"}`, "n must be an integer, got a string", "n"},
		{embeddings, `{"model":"sim-model","input":"x","dimensions":[]}`, "dimensions must be an integer, got an array", "dimensions"},
		{embeddings, `{"model":"sim-model","input":"x","encoding_format":false}`, "encoding_format must be a string, got a boolean", "encoding_format"},
	}
	goTypes := regexp.MustCompile(`Go |simengine|chatRequest|struct|\*int|\[\]\w|json:|unmarshal`)
	for _, tt := range tests {
		status, raw := post(t, srv.URL+tt.path, tt.body)
		var body struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &body); err != nil || status != http.StatusBadRequest {
			t.Errorf("%s %s: status %d, body %s (%v)", tt.path, tt.body, status, raw, err)
			continue
		}
		e := body.Error
		if e.Message != tt.want || e.Type != "invalid_request_error" || (e.Param == nil) != (tt.param == "") ||
			e.Param != nil && *e.Param != tt.param || goTypes.MatchString(e.Message) {
			param := "<null>"
			if e.Param != nil {
				param = *e.Param
			}
			t.Errorf("%s %s:\n got %q (param %s)\nwant %q (param %s)", tt.path, tt.body, e.Message, param, tt.want, tt.param)
		}
	}
}

func TestModelsAndHealth(t *testing.T) {
	_, srv := newTestServer(t, Config{Model: "hf://org/weights", MaxModelLen: 4096})
	resp, err := http.Get(srv.URL + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	want := modelCard{ID: testModel, Object: "model", OwnedBy: "llmgw-sim", Root: "hf://org/weights", MaxModelLen: 4096}
	if models.Object != "list" || len(models.Data) != 1 {
		t.Fatalf("models %+v", models)
	}
	got := models.Data[0]
	got.Created = 0
	if got != want {
		t.Fatalf("model card %+v, want %+v", got, want)
	}
}

func TestMetricsNames(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	var resp chatCompletion
	postOK(t, srv.URL+"/v1/chat/completions", chatBody("count me", map[string]any{"max_tokens": 3}), &resp)
	r, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	text := string(b)
	for _, name := range []string{
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc",
		"vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
	} {
		if !strings.Contains(text, "# TYPE "+name+" ") || !strings.Contains(text, name+`{model_name="sim-model"} `) {
			t.Errorf("metric %s missing or unlabelled", name)
		}
	}
	for _, series := range []string{
		`vllm:time_to_first_token_seconds_bucket{model_name="sim-model",le="+Inf"} 1`,
		`vllm:time_to_first_token_seconds_count{model_name="sim-model"} 1`,
		`vllm:request_success_total{finished_reason="length",model_name="sim-model"} 1`,
	} {
		if !strings.Contains(text, series+"\n") {
			t.Errorf("series %q missing", series)
		}
	}
	// Every sample line is name{labels} value.
	sample := regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\} [-+0-9.eInf]+$`)
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		if !strings.HasPrefix(line, "#") && !sample.MatchString(line) {
			t.Errorf("malformed sample line %q", line)
		}
	}
	checks := map[string]float64{
		`vllm:prompt_tokens_total{model_name="sim-model"}`:     4,
		`vllm:generation_tokens_total{model_name="sim-model"}`: 3,
		`vllm:num_requests_running{model_name="sim-model"}`:    0,
	}
	for series, want := range checks {
		if got := metricValue(t, srv.URL, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

func TestPrefixCacheSkipsPrefill(t *testing.T) {
	_, srv := newTestServer(t, Config{BlockSize: 4})
	hits := func() float64 { return metricValue(t, srv.URL, `vllm:prefix_cache_hits_total{model_name="sim-model"}`) }
	queries := func() float64 {
		return metricValue(t, srv.URL, `vllm:prefix_cache_queries_total{model_name="sim-model"}`)
	}
	body := map[string]any{"model": testModel, "prompt": "one two three four five six seven eight nine ten", "max_tokens": 2}

	var first, second textCompletion
	postOK(t, srv.URL+"/v1/completions", body, &first)
	if hits() != 0 || queries() != 10 {
		t.Fatalf("after a cold request hits %v queries %v, want 0 and 10", hits(), queries())
	}
	postOK(t, srv.URL+"/v1/completions", body, &second)
	// Two full blocks of four tokens were seen: eight tokens skip prefill, so
	// the second request's time to first token covers 2 tokens instead of 10.
	if hits() != 8 || queries() != 20 {
		t.Fatalf("after a repeat hits %v queries %v, want 8 and 20", hits(), queries())
	}
	if first.Usage.PromptTokensDetails.CachedTokens != 0 || second.Usage.PromptTokensDetails.CachedTokens != 8 {
		t.Fatalf("cached_tokens %d then %d, want 0 then 8",
			first.Usage.PromptTokensDetails.CachedTokens, second.Usage.PromptTokensDetails.CachedTokens)
	}
	if u := metricValue(t, srv.URL, `vllm:kv_cache_usage_perc{model_name="sim-model"}`); u <= 0 || u > 1 {
		t.Fatalf("kv cache usage %v, want in (0,1]", u)
	}
}

func TestConversationHitsCacheOnNextTurn(t *testing.T) {
	_, srv := newTestServer(t, Config{BlockSize: 2})
	url := srv.URL + "/v1/chat/completions"
	msgs := []map[string]string{{"role": "user", "content": "a b c d"}}
	var turn1 chatCompletion
	postOK(t, url, map[string]any{"model": testModel, "messages": msgs, "max_tokens": 4}, &turn1)
	msgs = append(msgs, map[string]string{"role": "assistant", "content": *turn1.Choices[0].Message.Content},
		map[string]string{"role": "user", "content": "e f"})
	var turn2 chatCompletion
	postOK(t, url, map[string]any{"model": testModel, "messages": msgs, "max_tokens": 4}, &turn2)
	// Prompt and reply (8 tokens) were cached after turn one.
	if got := turn2.Usage.PromptTokensDetails.CachedTokens; got != 8 {
		t.Fatalf("turn two cached %d tokens, want 8", got)
	}
}

func TestClientDisconnectCancelsGeneration(t *testing.T) {
	_, srv := newTestServer(t, Config{DecodeTokensPerSec: 20})
	running := func() float64 { return metricValue(t, srv.URL, `vllm:num_requests_running{model_name="sim-model"}`) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-model","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"long"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first stream line %q: %v", line, err)
	}
	if running() != 1 {
		t.Fatalf("running = %v while streaming, want 1", running())
	}
	cancel()
	// 1000 tokens at 20/s would take 50 s; a cancelled request frees its slot now.
	waitFor(t, 5*time.Second, "the cancelled request to stop running", func() bool { return running() == 0 })
	waitFor(t, 5*time.Second, "the abort to be counted", func() bool {
		return metricValue(t, srv.URL, `vllm:request_success_total{finished_reason="abort",model_name="sim-model"}`) == 1
	})
}

func TestRatesShapeTiming(t *testing.T) {
	// 50 prompt tokens at 1000/s is 50 ms before the first token; 5 more
	// tokens at 100/s is 40 ms. Timing is only checked from below.
	_, srv := newTestServer(t, Config{PrefillTokensPerSec: 1000, DecodeTokensPerSec: 100})
	start := time.Now()
	var resp textCompletion
	postOK(t, srv.URL+"/v1/completions", map[string]any{"model": testModel, "prompt": strings.Repeat("w ", 50), "max_tokens": 5}, &resp)
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Fatalf("request took %s, want at least 90ms of simulated prefill and decode", d)
	}
	if got := metricValue(t, srv.URL, `vllm:time_to_first_token_seconds_bucket{model_name="sim-model",le="0.04"}`); got != 0 {
		t.Fatalf("a first token came within 40ms; want prefill to take 50ms")
	}
}

func TestWaitingQueue(t *testing.T) {
	_, srv := newTestServer(t, Config{MaxNumSeqs: 1, DecodeTokensPerSec: 20})
	metric := func(name string) float64 { return metricValue(t, srv.URL, name+`{model_name="sim-model"}`) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions",
				strings.NewReader(`{"model":"sim-model","prompt":"x","max_tokens":1000}`))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
	}
	waitFor(t, 5*time.Second, "one running and one waiting", func() bool {
		return metric("vllm:num_requests_running") == 1 && metric("vllm:num_requests_waiting") == 1
	})
	cancel()
	for range 2 {
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("request ended with %v, want context.Canceled", err)
		}
	}
	waitFor(t, 5*time.Second, "the queue to drain", func() bool {
		return metric("vllm:num_requests_running") == 0 && metric("vllm:num_requests_waiting") == 0
	})
}

func TestRunServesAndLogsAddress(t *testing.T) {
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Host: "127.0.0.1", Port: 0, ServedModelName: testModel}, logs.logger())
	}()
	addrRE := regexp.MustCompile(`msg=serving addr=(\S+)`)
	var addr string
	waitFor(t, 5*time.Second, "the serving log line", func() bool {
		m := addrRE.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health on logged address %s: %v %v", addr, resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if dials(addr) {
		t.Fatalf("%s still accepts connections after Run returned", addr)
	}
}
