package manage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/spec"
)

// Tool check verdicts.
const (
	ToolsStructured = "structured"
	ToolsText       = "text"
	ToolsRefused    = "refused"
	ToolsNoCall     = "no_call"
)

// toolCheckTool is the one tool the check offers.
const toolCheckTool = "get_weather"

// toolCheckBody is the chat request the check sends: a question only the
// tool answers, tool_choice "auto" (what exercises the engine's tool-call
// parser: "required" and a named function are decoded under a grammar
// even without one), one call.
func toolCheckBody(model string) map[string]any {
	return map[string]any{
		"model": model,
		"messages": []any{map[string]any{"role": "user",
			"content": "What is the weather in Paris right now? Call the " + toolCheckTool + " tool to find out."}},
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name":        toolCheckTool,
			"description": "Get the current weather in a city.",
			"parameters": map[string]any{
				"type":                 "object",
				"properties":           map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris"}}},
				"required":             []string{"city"},
				"additionalProperties": false,
			},
		}}},
		"tool_choice":         "auto",
		"parallel_tool_calls": false,
		"max_tokens":          256,
		"stream":              false,
	}
}

// CheckTools implements the management API: it sends one ready replica of
// the model (not one draining) the tool-check request, straight to its
// engine, and reads the answer (readToolAnswer).
func (s *Service) CheckTools(ctx context.Context, req *managev1.CheckToolsRequest) (*managev1.ToolCheck, error) {
	name, ok := s.opts.Catalog.Resolve(req.GetModel())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "model %q is not in the catalog", req.GetModel())
	}
	var rep *fleet.Replica
	replicas := s.opts.Fleet.Replicas()
	sort.Slice(replicas, func(i, j int) bool { return replicas[i].ID < replicas[j].ID })
	draining := s.draining() // about to be stopped: the check could be cut
	for _, r := range replicas {
		if r.Model == name && r.State == fleet.ReplicaReady && !draining[r.ID] && len(r.Shards) > 0 && r.Shards[0].Endpoint != "" {
			rep = &r
			break
		}
	}
	if rep == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "checking the tool calls of model %s: no replica of it is ready", name)
	}
	body := toolCheckBody(name)
	if extra := strings.TrimSpace(req.GetExtraBodyJson()); extra != "" {
		var add map[string]any
		if err := json.Unmarshal([]byte(extra), &add); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "checking the tool calls of model %s: extra body: not a JSON object: %v", name, err)
		}
		for k, v := range add {
			body[k] = v
		}
	}
	timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, _ := json.Marshal(body)
	url := "http://" + rep.Shards[0].Endpoint + "/v1/chat/completions"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "checking the tool calls of model %s: %v", name, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hreq) //nolint:gosec // the engine's address as its agent reported it
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "checking the tool calls of model %s: replica %s (%s): %v", name, rep.ID, url, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	out := readToolAnswer(rep.Profile, resp.StatusCode, answer)
	out.Model, out.Replica, out.Engine = name, rep.ID, rep.Profile.Engine
	s.log.Info("tool check", "model", name, "replica", rep.ID, "verdict", out.GetVerdict())
	return out, nil
}

// textMarkers are the ways models write a tool call when no parser takes
// it out of the text, with the parser that reads each: vLLM's
// --tool-call-parser name and SGLang's.
var textMarkers = []struct {
	marker string
	vllm   string
	sglang string
}{
	{"<tool_call>", "hermes", "qwen25"},
	{"[TOOL_CALLS]", "mistral", "mistral"},
	{"<|python_tag|>", "llama3_json", "llama3"},
	{"<function=", "llama4_pythonic", "pythonic"},
	{`"name": "` + toolCheckTool + `"`, "llama3_json", "llama3"},
	{`"name":"` + toolCheckTool + `"`, "llama3_json", "llama3"},
	{"[" + toolCheckTool + "(", "pythonic", "pythonic"},
}

// readToolAnswer reads the engine's answer to the tool-check request:
// structured tool_calls; the call written as text (the engine has no
// parser for this model's format, or none switched on); the tools refused
// (an error answer); or an answer with no call at all, which proves
// nothing. For text and refused it names the flag that fixes it on p's
// engine.
func readToolAnswer(p spec.Profile, code int, body []byte) *managev1.ToolCheck {
	out := &managev1.ToolCheck{}
	if code != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &e) == nil {
			if e.Error.Message != "" {
				msg = e.Error.Message
			} else if e.Message != "" {
				msg = e.Message
			}
		}
		out.Verdict = ToolsRefused
		out.Detail = fmt.Sprintf("the engine answered %d: %s", code, firstLine(msg, 300))
		out.Fix = refusedFix(p, msg)
		return out
	}
	var r struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) == 0 {
		out.Verdict = ToolsNoCall
		out.Detail = "the engine's answer is not a chat completion: " + firstLine(string(body), 200)
		return out
	}
	c := r.Choices[0]
	out.FinishReason = c.FinishReason
	if c.Message.Content != nil {
		out.Content = firstLine(*c.Message.Content, 300)
	}
	for _, tc := range c.Message.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, tc.Function.Name+"("+tc.Function.Arguments+")")
	}
	if len(out.ToolCalls) > 0 {
		out.Verdict = ToolsStructured
		out.Detail = fmt.Sprintf("the engine answered with %d structured tool call(s): %s", len(out.ToolCalls), strings.Join(out.ToolCalls, ", "))
		return out
	}
	content := ""
	if c.Message.Content != nil {
		content = *c.Message.Content
	}
	for _, m := range textMarkers {
		if strings.Contains(content, m.marker) {
			out.Verdict = ToolsText
			out.Detail = fmt.Sprintf("the engine answered with the call as plain text (it starts with %q) and no tool_calls: its tool-call parser does not read this model's format", m.marker)
			out.Fix = textFix(p, m.vllm, m.sglang)
			return out
		}
	}
	out.Verdict = ToolsNoCall
	out.Detail = "the engine answered without a call, as text or as a tool call; nothing to tell from it (ask again, or raise max_tokens with --extra)"
	return out
}

// refusedFix names the flag that makes p's engine take tools, from what
// it answered.
func refusedFix(p spec.Profile, msg string) string {
	switch p.Engine {
	case "llamacpp":
		if strings.Contains(msg, "jinja") {
			return "--jinja (and no --no-jinja in the profile's args)"
		}
	case "vllm":
		if strings.Contains(msg, "enable-auto-tool-choice") || strings.Contains(msg, "tool-call-parser") || strings.Contains(msg, "tool_choice") {
			return "--enable-auto-tool-choice --tool-call-parser <parser for the model, e.g. hermes>"
		}
	case "sglang":
		if strings.Contains(msg, "tool") {
			return "--tool-call-parser <parser for the model, e.g. qwen25>"
		}
	}
	return ""
}

// textFix names the flag that has p's engine parse the call format found.
func textFix(p spec.Profile, vllmParser, sglangParser string) string {
	switch p.Engine {
	case "vllm":
		return "--enable-auto-tool-choice --tool-call-parser " + vllmParser
	case "sglang":
		return "--tool-call-parser " + sglangParser
	case "llamacpp":
		if _, set := spec.ArgValue(p.Args, "--chat-template"); set {
			return "--jinja without --chat-template (the model's own template renders tools; or --chat-template-file with one that does)"
		}
		return "--jinja, with a chat template that renders tools (--chat-template-file)"
	}
	return ""
}

// firstLine returns s up to its first line break, at most max bytes.
func firstLine(s string, max int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
