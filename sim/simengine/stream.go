package simengine

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// streamOptions is the request's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// sseWriter writes Server-Sent Events the way OpenAI streams: one
// `data: {json}` event per chunk and a final `data: [DONE]`.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
}

// send writes one chunk and flushes it to the client.
func (s *sseWriter) send(chunk any) error {
	b, err := json.Marshal(chunk)
	if err != nil {
		return fmt.Errorf("encoding stream chunk: %w", err)
	}
	return s.write("data: " + string(b) + "\n\n")
}

// done writes the terminating [DONE] event.
func (s *sseWriter) done() error { return s.write("data: [DONE]\n\n") }

func (s *sseWriter) write(event string) error {
	s.start()
	if _, err := s.w.Write([]byte(event)); err != nil {
		return fmt.Errorf("writing stream event: %w", err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flushing stream event: %w", err)
	}
	return nil
}
