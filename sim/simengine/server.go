package simengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 16 << 20

// shutdownGrace is how long in-flight requests get when Run is stopped.
const shutdownGrace = 5 * time.Second

// Engine is one simulated engine's state: its prefix cache, its metrics and
// its admission queue. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	created int64
	cache   *prefixCache
	metrics *metrics
	slots   chan struct{} // one per request allowed to generate at once
	mux     *http.ServeMux
}

// New validates cfg (after filling defaults) and builds an Engine. It does
// not listen; use Handler in-process or Run as a process.
func New(cfg Config, logger *slog.Logger) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg:     cfg,
		log:     logger,
		created: time.Now().Unix(),
		cache:   newPrefixCache(cfg.PrefixCacheBlocks, cfg.BlockSize),
		slots:   make(chan struct{}, cfg.MaxNumSeqs),
		mux:     http.NewServeMux(),
	}
	e.metrics = newMetrics(cfg.ServedModelName, e.cache.usage)
	e.mux.HandleFunc("GET /health", e.handleHealth)
	e.mux.HandleFunc("GET /v1/models", e.handleModels)
	e.mux.HandleFunc("POST /v1/chat/completions", e.handleChat)
	e.mux.HandleFunc("POST /v1/completions", e.handleCompletions)
	e.mux.HandleFunc("POST /v1/embeddings", e.handleEmbeddings)
	e.mux.Handle("GET /metrics", e.metrics)
	return e, nil
}

// Handler is the engine's HTTP API, for serving in-process.
func (e *Engine) Handler() http.Handler { return e.mux }

// Run runs one rank until ctx is cancelled. A worker (rank > 0) joins rank 0
// and serves nothing; it returns an error when rank 0 goes away. Rank 0 of a
// multi-node replica waits for every worker before it binds its HTTP port,
// and returns an error when a worker goes away. Cancelling ctx is a clean
// stop and returns nil.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e, err := New(cfg, logger)
	if err != nil {
		return err
	}
	cfg = e.cfg
	if cfg.Rank > 0 {
		return runWorker(ctx, cfg, logger)
	}
	var lost <-chan error
	if cfg.WorldSize > 1 {
		g, err := rendezvous(ctx, cfg, logger)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer g.close()
		lost = g.lost
	}
	return e.serve(ctx, lost)
}

// serve binds the HTTP port and serves until ctx ends or a worker is lost.
func (e *Engine) serve(ctx context.Context, lost <-chan error) error {
	addr := net.JoinHostPort(e.cfg.Host, strconv.Itoa(e.cfg.Port))
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("binding http address %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           e.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	e.log.Info("serving", "addr", ln.Addr().String(), "model", e.cfg.ServedModelName,
		"rank", e.cfg.Rank, "world_size", e.cfg.WorldSize)

	var result error
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serving http on %s: %w", ln.Addr(), err)
	case err := <-lost:
		result = err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return result
}

func (e *Engine) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root,omitempty"`
	MaxModelLen int    `json:"max_model_len"`
}

func (e *Engine) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []modelCard{{
			ID:          e.cfg.ServedModelName,
			Object:      "model",
			Created:     e.created,
			OwnedBy:     "llmgw-sim",
			Root:        e.cfg.Model,
			MaxModelLen: e.cfg.MaxModelLen,
		}},
	})
}

// execute runs one request through admission, prefill and decode. It calls
// emit(i) for each of the pieces output pieces at the simulated pace and
// returns the number of prompt tokens found in the prefix cache.
func (e *Engine) execute(ctx context.Context, start time.Time, prompt []string, pieces int, emit func(i int) error) (cachedTokens int, err error) {
	e.metrics.waiting.Inc()
	select {
	case e.slots <- struct{}{}:
		e.metrics.waiting.Dec()
	case <-ctx.Done():
		e.metrics.waiting.Dec()
		return 0, ctx.Err()
	}
	e.metrics.running.Inc()
	defer func() {
		e.metrics.running.Dec()
		<-e.slots
	}()

	cachedTokens = e.cache.lookup(prompt)
	e.metrics.cacheQueries.Add(float64(len(prompt)))
	e.metrics.cacheHits.Add(float64(cachedTokens))
	if err := sleepCtx(ctx, perTokens(len(prompt)-cachedTokens, e.cfg.PrefillTokensPerSec)); err != nil {
		return cachedTokens, err
	}
	e.metrics.promptTokens.Add(float64(len(prompt)))

	decodeStart := time.Now()
	step := perTokens(1, e.cfg.DecodeTokensPerSec)
	for i := range pieces {
		if i > 0 {
			if err := sleepCtx(ctx, time.Until(decodeStart.Add(time.Duration(i)*step))); err != nil {
				return cachedTokens, err
			}
		}
		if err := emit(i); err != nil {
			return cachedTokens, err
		}
		if i == 0 {
			e.metrics.observeTTFT(time.Since(start).Seconds())
		}
		e.metrics.generationTokens.Inc()
	}
	return cachedTokens, nil
}

// finish records how a request ended; a cancelled one counts as "abort".
func (e *Engine) finish(err error, reason string) {
	if err != nil {
		reason = "abort"
	}
	e.metrics.requestFinished(reason)
}

// perTokens is how long n tokens take at rate tokens per second.
func perTokens(n int, rate float64) time.Duration {
	if rate <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(float64(n) / rate * float64(time.Second))
}

// sleepCtx waits d or until ctx ends, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// checkPrompt rejects a prompt that leaves no room for a completion and a
// max_tokens below one; it writes the 400 itself and reports false.
func (e *Engine) checkPrompt(w http.ResponseWriter, promptTokens int, maxTokens *int, maxParam string) bool {
	if maxTokens != nil && *maxTokens < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s must be at least 1, got %d", maxParam, *maxTokens), maxParam, "")
		return false
	}
	if promptTokens >= e.cfg.MaxModelLen {
		writeContextError(w, e.cfg.MaxModelLen, promptTokens)
		return false
	}
	return true
}

// writeContextError refuses a prompt longer than the context as vLLM
// (0.10 and later) does: its words and its error body, whose type is the
// Python exception's name and whose code is the HTTP status.
func writeContextError(w http.ResponseWriter, maxModelLen, promptTokens int) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
		"message": fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.",
			maxModelLen, promptTokens),
		"type":  "BadRequestError",
		"param": nil,
		"code":  http.StatusBadRequest,
	}})
}

// checkModel answers 404 model_not_found for a model this engine does not
// serve. An empty model means the served one, as in vLLM.
func (e *Engine) checkModel(w http.ResponseWriter, model string) bool {
	if model == "" || model == e.cfg.ServedModelName {
		return true
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", model), "model", "model_not_found")
	return false
}

// decodeBody reads a JSON request body into v, answering 400 when it is not
// valid JSON of the right shape; a value of the wrong type is named by its
// field and JSON types (decodeError).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		if msg, param, ok := decodeError("", v, err); ok {
			writeError(w, http.StatusBadRequest, msg, param, "invalid_type")
			return false
		}
		msg := fmt.Sprintf("invalid JSON body: %v", err)
		if errors.Is(err, io.EOF) {
			msg = "invalid JSON body: empty"
		}
		writeError(w, http.StatusBadRequest, msg, "", "")
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "invalid JSON body: trailing data after the object", "", "")
		return false
	}
	return true
}

// apiError is OpenAI's error object; empty Param and Code encode as null.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func writeError(w http.ResponseWriter, status int, message, param, code string) {
	e := apiError{Message: message, Type: "invalid_request_error"}
	if status >= 500 {
		e.Type = "server_error"
	}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	writeJSON(w, status, map[string]apiError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newID is an OpenAI-style object id such as chatcmpl-1f2e....
func newID(prefix string) string {
	return fmt.Sprintf("%s-%016x%08x", prefix, rand.Uint64(), rand.Uint32())
}

// usage is OpenAI's usage object.
type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails *promptTokenDetails `json:"prompt_tokens_details,omitempty"`
}

type promptTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func newUsage(prompt, completion, cached int) *usage {
	return &usage{
		PromptTokens:        prompt,
		CompletionTokens:    completion,
		TotalTokens:         prompt + completion,
		PromptTokensDetails: &promptTokenDetails{CachedTokens: cached},
	}
}
