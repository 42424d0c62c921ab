package simengine

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// maxEmbeddingDim bounds the dimensions a request may ask for.
const maxEmbeddingDim = 65536

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type embeddingList struct {
	Object string          `json:"object"`
	Data   []embeddingItem `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingUsage  `json:"usage"`
}

type embeddingItem struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

func (e *Engine) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	if !decodeBody(w, r, &req) || !e.checkModel(w, req.Model) {
		return
	}
	inputs, err := parsePrompts(req.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, strings.Replace(err.Error(), "prompt", "input", 1), "input", "")
		return
	}
	dim := e.cfg.EmbeddingDim
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > maxEmbeddingDim {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("dimensions must be 1-%d, got %d", maxEmbeddingDim, *req.Dimensions), "dimensions", "")
			return
		}
		dim = *req.Dimensions
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("encoding_format %q is not float or base64", req.EncodingFormat), "encoding_format", "")
		return
	}
	resp := embeddingList{Object: "list", Model: e.cfg.ServedModelName, Data: make([]embeddingItem, len(inputs))}
	for i, tokens := range inputs {
		if len(tokens) >= e.cfg.MaxModelLen {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(
				"This model's maximum context length is %d tokens. However, input %d has %d tokens.",
				e.cfg.MaxModelLen, i, len(tokens)), "input", "context_length_exceeded")
			return
		}
		vec := embed(tokens, dim)
		item := embeddingItem{Object: "embedding", Index: i, Embedding: vec}
		if req.EncodingFormat == "base64" {
			item.Embedding = encodeFloats(vec)
		}
		resp.Data[i] = item
		resp.Usage.PromptTokens += len(tokens)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	if err := sleepCtx(r.Context(), perTokens(resp.Usage.PromptTokens, e.cfg.PrefillTokensPerSec)); err != nil {
		return
	}
	e.metrics.promptTokens.Add(float64(resp.Usage.PromptTokens))
	writeJSON(w, http.StatusOK, resp)
}

// embed is a deterministic unit vector for the tokens: the same text always
// maps to the same vector, different texts almost surely to different ones.
func embed(tokens []string, dim int) []float32 {
	src := newWordSource(hashTokens(tokens))
	v := make([]float64, dim)
	var norm float64
	for norm == 0 {
		for i := range v {
			v[i] = src.rng.NormFloat64()
			norm += v[i] * v[i]
		}
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dim)
	for i := range v {
		out[i] = float32(v[i] / norm)
	}
	return out
}

// encodeFloats is OpenAI's base64 encoding: little-endian float32s.
func encodeFloats(v []float32) string {
	buf := make([]byte, 0, 4*len(v))
	for _, f := range v {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(buf)
}
