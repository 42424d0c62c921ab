package simengine

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"
)

type embeddingReply struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage embeddingUsage `json:"usage"`
}

func TestEmbeddings(t *testing.T) {
	_, srv := newTestServer(t, Config{EmbeddingDim: 32})
	url := srv.URL + "/v1/embeddings"
	tests := []struct {
		name       string
		body       map[string]any
		wantItems  int
		wantDim    int
		wantTokens int
	}{
		{name: "string", body: map[string]any{"input": "hello embedding world"}, wantItems: 1, wantDim: 32, wantTokens: 3},
		{name: "array", body: map[string]any{"input": []string{"a b", "c"}}, wantItems: 2, wantDim: 32, wantTokens: 3},
		{name: "dimensions", body: map[string]any{"input": "a", "dimensions": 8}, wantItems: 1, wantDim: 8, wantTokens: 1},
		{name: "base64", body: map[string]any{"input": "a b", "encoding_format": "base64"}, wantItems: 1, wantDim: 32, wantTokens: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.body["model"] = testModel
			var resp embeddingReply
			postOK(t, url, tt.body, &resp)
			if resp.Object != "list" || resp.Model != testModel || len(resp.Data) != tt.wantItems {
				t.Fatalf("reply %+v", resp)
			}
			if resp.Usage.PromptTokens != tt.wantTokens || resp.Usage.TotalTokens != tt.wantTokens {
				t.Fatalf("usage %+v, want %d tokens", resp.Usage, tt.wantTokens)
			}
			for i, d := range resp.Data {
				if d.Object != "embedding" || d.Index != i {
					t.Fatalf("item %d: %+v", i, d)
				}
				vec := decodeEmbedding(t, d.Embedding)
				if len(vec) != tt.wantDim {
					t.Fatalf("item %d has %d dimensions, want %d", i, len(vec), tt.wantDim)
				}
				var norm float64
				for _, v := range vec {
					norm += float64(v) * float64(v)
				}
				if math.Abs(math.Sqrt(norm)-1) > 1e-5 {
					t.Fatalf("item %d has norm %f, want 1", i, math.Sqrt(norm))
				}
			}
		})
	}
}

func TestEmbeddingsDeterministic(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	get := func(input any) [][]float32 {
		var resp embeddingReply
		postOK(t, srv.URL+"/v1/embeddings", map[string]any{"model": testModel, "input": input}, &resp)
		var out [][]float32
		for _, d := range resp.Data {
			out = append(out, decodeEmbedding(t, d.Embedding))
		}
		return out
	}
	one, batch := get("same text"), get([]string{"other", "same text"})
	if len(one[0]) != DefaultEmbeddingDim {
		t.Fatalf("default dimension %d, want %d", len(one[0]), DefaultEmbeddingDim)
	}
	for i := range one[0] {
		if one[0][i] != batch[1][i] {
			t.Fatalf("same text embedded differently at %d: %v vs %v", i, one[0][i], batch[1][i])
		}
	}
	if one[0][0] == batch[0][0] && one[0][1] == batch[0][1] {
		t.Fatalf("different texts embedded identically")
	}
}

// decodeEmbedding reads a float array or OpenAI's base64 float32 encoding.
func decodeEmbedding(t *testing.T, raw json.RawMessage) []float32 {
	t.Helper()
	var floats []float32
	if json.Unmarshal(raw, &floats) == nil {
		return floats
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("embedding %s is neither floats nor base64", raw)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("embedding base64 %q: %v", s, err)
	}
	for i := 0; i < len(b); i += 4 {
		floats = append(floats, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	return floats
}
