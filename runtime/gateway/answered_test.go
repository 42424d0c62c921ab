package gateway

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/llmgw/llmgw/runtime/request"
)

// TestAnsweredWithoutUsageChargesReservation: a non-streamed request the
// engine answered (200 headers) whose body held no usage, or never came
// whole, is settled as abandoned (its reservation charged), not at 0.
func TestAnsweredWithoutUsageChargesReservation(t *testing.T) {
	tests := []struct {
		name   string
		handle func(w http.ResponseWriter, r *http.Request, body map[string]any)
	}{
		{"no usage in the body", func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`))
		}},
		{"body cut short", func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(4096))
			_, _ = w.Write([]byte(`{"id":"x","choices":[`))
			_ = http.NewResponseController(w).Flush()
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			adm := &recordingAdmission{}
			h := newHarness(t, 1, Config{}, adm)
			h.engines[0].handle = tt.handle
			resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"coder","max_tokens":10}`)
			defer resp.Body.Close()
			readAll(t, resp)
			u := adm.settled(t)
			if !u.Abandoned {
				t.Errorf("settled usage = %+v; want abandoned (the reservation charged)", u)
			}
			if rec := h.record(); !rec.UsageEstimated {
				t.Errorf("record = %+v; want the usage marked estimated", rec)
			}
		})
	}
}

// TestTypicalPromptTokens: what a prompt is billed when the engine counts
// nothing is about a token per four bytes, far below the reservation's
// bound (a token per byte plus the template allowance), and never above it.
func TestTypicalPromptTokens(t *testing.T) {
	for _, tt := range []struct {
		bytes int
		ids   bool
		want  int
	}{{4000, false, 1000}, {6000, true, 1000}, {0, false, 1}, {3, false, 1}} {
		got := request.TypicalPromptTokens(tt.bytes, tt.ids)
		if got != tt.want || got > request.EstimatePromptTokens(tt.bytes, tt.ids) {
			t.Errorf("TypicalPromptTokens(%d, %v) = %d; want %d, within the bound %d", tt.bytes, tt.ids, got, tt.want, request.EstimatePromptTokens(tt.bytes, tt.ids))
		}
	}
}
