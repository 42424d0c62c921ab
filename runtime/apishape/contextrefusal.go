package apishape

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// ContextRefusal is what an engine said when it refused a request for
// being longer than its context: the context in tokens and the prompt's
// tokens, each 0 when its message does not say.
type ContextRefusal struct {
	Limit, Prompt int
}

// The engines' words, as their servers write them:
//
//	vLLM:  This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. ...
//	       'max_tokens' or 'max_completion_tokens' is too large: 800. This model's maximum context length is 4096 tokens and your request has 3500 input tokens (800 > 4096 - 3500).
//	       (before 0.10) ... However, you requested 5000 tokens (4200 in the messages, 800 in the completion). ...
//	llama-server: request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it
//	       (its error also has n_prompt_tokens and n_ctx; older ones say only
//	       "the request exceeds the available context size")
//	SGLang: The input (5000 tokens) is longer than the model's context length (4096 tokens).
//	       Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 5000 tokens: 4200 tokens from the input messages and 800 tokens for the completion. ...
var (
	limitPatterns = []*regexp.Regexp{
		regexp.MustCompile(`maximum context length (?:is|of) (\d+) tokens`),
		regexp.MustCompile(`available context size \((\d+) tokens\)`),
		regexp.MustCompile(`model's context length \((\d+) tokens\)`),
	}
	promptPatterns = []*regexp.Regexp{
		regexp.MustCompile(`request has (\d+) input tokens`),
		regexp.MustCompile(`\((\d+) in the messages`),
		regexp.MustCompile(`requested (\d+) tokens in the messages`),
		regexp.MustCompile(`^request \((\d+) tokens\)`),
		regexp.MustCompile(`The input \((\d+) tokens\)`),
		regexp.MustCompile(`(\d+) tokens from the input messages`),
	}
	contextWords = []string{"maximum context length", "exceeds the available context size", "longer than the model's context length", "context_length_exceeded"}
)

// ParseContextRefusal reads an engine's 400 body: ok when it refused the
// request for its length (vLLM's, llama-server's and SGLang's words,
// OpenAI's context_length_exceeded code, llama-server's
// exceed_context_size_error type).
func ParseContextRefusal(body []byte) (r ContextRefusal, ok bool) {
	var v struct {
		Error json.RawMessage `json:"error"`
		// vLLM before 0.10 put the message at the top level.
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &v) != nil {
		return r, false
	}
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		NPrompt int             `json:"n_prompt_tokens"`
		NCtx    int             `json:"n_ctx"`
	}
	if len(v.Error) > 0 && v.Error[0] == '{' {
		_ = json.Unmarshal(v.Error, &e)
	} else {
		// SGLang: {"object":"error","message":...}; an error that is a
		// string is its message.
		_ = json.Unmarshal(v.Error, &e.Message)
	}
	if e.Message == "" {
		e.Message = v.Message
	}
	code, _ := strconv.Unquote(string(e.Code))
	ok = e.Type == "exceed_context_size_error" || code == "context_length_exceeded"
	for _, w := range contextWords {
		ok = ok || strings.Contains(e.Message, w)
	}
	if !ok {
		return r, false
	}
	r.Limit, r.Prompt = e.NCtx, e.NPrompt
	if r.Limit == 0 {
		r.Limit = firstNumber(limitPatterns, e.Message)
	}
	if r.Prompt == 0 {
		r.Prompt = firstNumber(promptPatterns, e.Message)
	}
	return r, true
}

func firstNumber(res []*regexp.Regexp, s string) int {
	for _, re := range res {
		if m := re.FindStringSubmatch(s); m != nil {
			n, err := strconv.Atoi(m[1])
			if err == nil {
				return n
			}
		}
	}
	return 0
}
