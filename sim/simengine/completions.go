package simengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// completionRequest is the part of an OpenAI (legacy) completion request the
// engine reads.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	N             *int            `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
}

// textCompletion is OpenAI's text_completion object, also used for chunks.
type textCompletion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

func (e *Engine) handleCompletions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req completionRequest
	if !decodeBody(w, r, &req) || !e.checkModel(w, req.Model) {
		return
	}
	if req.N != nil && *req.N != 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("n must be 1 on the sim engine, got %d", *req.N), "n", "")
		return
	}
	prompts, err := parsePrompts(req.Prompt)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "prompt", "")
		return
	}
	plans := make([]completionPlan, len(prompts))
	for i, p := range prompts {
		if !e.checkPrompt(w, len(p), req.MaxTokens, "max_tokens") {
			return
		}
		plans[i] = overshoot(planCompletion(req.MaxTokens, len(p), e.cfg.MaxModelLen, e.cfg.EOSAfter, req.IgnoreEOS),
			req.MaxTokens, e.cfg.OvershootTokens)
	}

	id := newID("cmpl")
	created := time.Now().Unix()
	var sse *sseWriter
	if req.Stream {
		sse = newSSEWriter(w)
	}
	resp := textCompletion{ID: id, Object: "text_completion", Created: created, Model: e.cfg.ServedModelName}
	total := &usage{PromptTokensDetails: &promptTokenDetails{}}
	for i, prompt := range prompts {
		plan := plans[i]
		src := newWordSource(hashTokens(prompt))
		words := make([]string, plan.tokens)
		for j := range words {
			words[j] = src.next()
		}
		cached, err := e.execute(r.Context(), start, prompt, len(words), func(j int) error {
			if sse == nil {
				return nil
			}
			piece := words[j]
			if j > 0 {
				piece = " " + piece
			}
			return sse.send(textCompletion{
				ID: id, Object: "text_completion", Created: created, Model: e.cfg.ServedModelName,
				Choices: []completionChoice{{Index: i, Text: piece}},
			})
		})
		e.finish(err, plan.finishReason)
		e.log.Debug("completion", "id", id, "index", i, "stream", req.Stream, "prompt_tokens", len(prompt),
			"cached_tokens", cached, "completion_tokens", len(words), "finish_reason", plan.finishReason, "err", err)
		if err != nil {
			return
		}
		e.cache.insert(append(prompt, words...))
		finish := plan.finishReason
		total.PromptTokens += len(prompt)
		total.CompletionTokens += len(words)
		total.PromptTokensDetails.CachedTokens += cached
		if sse != nil {
			if err := sse.send(textCompletion{
				ID: id, Object: "text_completion", Created: created, Model: e.cfg.ServedModelName,
				Choices: []completionChoice{{Index: i, FinishReason: &finish}},
			}); err != nil {
				return
			}
			continue
		}
		resp.Choices = append(resp.Choices, completionChoice{Index: i, Text: strings.Join(words, " "), FinishReason: &finish})
	}
	total.TotalTokens = total.PromptTokens + total.CompletionTokens
	if sse == nil {
		resp.Usage = total
		writeJSON(w, http.StatusOK, resp)
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		if err := sse.send(textCompletion{
			ID: id, Object: "text_completion", Created: created, Model: e.cfg.ServedModelName,
			Choices: []completionChoice{}, Usage: total,
		}); err != nil {
			return
		}
	}
	_ = sse.done()
}

// parsePrompts reads a completion prompt: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids. Each prompt is
// returned as its tokens; token ids become their decimal text.
func parsePrompts(raw json.RawMessage) ([][]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("prompt is required")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return [][]string{tokenize(one)}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		if len(many) == 0 {
			return nil, errors.New("prompt must not be an empty array")
		}
		out := make([][]string, len(many))
		for i, s := range many {
			out[i] = tokenize(s)
		}
		return out, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		return [][]string{idTokens(ids)}, nil
	}
	var idLists [][]int64
	if json.Unmarshal(raw, &idLists) == nil && len(idLists) > 0 {
		out := make([][]string, len(idLists))
		for i, l := range idLists {
			out[i] = idTokens(l)
		}
		return out, nil
	}
	return nil, errors.New("prompt must be a string, an array of strings, or token ids")
}

func idTokens(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out
}
