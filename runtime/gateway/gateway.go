// Package gateway is the control plane's client API: an OpenAI-compatible
// HTTP handler that authenticates a key, resolves the model, admits the
// request, asks the router for a replica endpoint and proxies the request to
// it, streaming the answer back and counting the tokens the engine reports.
//
// The gateway knows models and endpoints only; how a replica was placed is
// none of its business.
//
// Files: gateway.go (construction, routing of paths, the request flow),
// request.go (body reading, parsing and in-place rewriting), upstream.go
// (forwarding, failover and the non-streamed relay), upconn.go (the
// connections to engines), stream.go (SSE relay and usage scanning),
// models.go (/v1/models), errors.go (OpenAI error bodies).
package gateway

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

// Defaults for zero Config fields.
const (
	DefaultMaxBodyBytes          = 16 << 20
	DefaultResponseHeaderTimeout = 10 * time.Minute
	DefaultGenerationTimeout     = 30 * time.Minute
	DefaultRetryAfter            = 5 * time.Second
	DefaultBodyTimeout           = 60 * time.Second
	DefaultColdStartWait         = 5 * time.Second
	DefaultStreamIdleTimeout     = 5 * time.Minute
	DefaultMaxNotesPerAgent      = 1000
	DefaultMaxNotesPerProject    = 10000
)

// Config tunes the gateway. Zero fields take the defaults above.
type Config struct {
	// MaxBodyBytes is the largest request body accepted; larger gets 413.
	// It bounds what a thread keeps too (threadShape.completed).
	MaxBodyBytes int64
	// BodyTimeout bounds how long a client may take to send a request's
	// body, counted from the end of its headers; a body not in by then
	// gets 408. The deadline is lifted once the body is read, so an answer
	// may take as long as it takes.
	BodyTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an engine's response
	// headers. A non-streamed generation sends its headers only when it is
	// complete, so this also bounds non-streamed generations.
	ResponseHeaderTimeout time.Duration
	// GenerationTimeout bounds a whole upstream request, streamed or not.
	GenerationTimeout time.Duration
	// RetryAfter is sent with 503 when a model has no ready replica (and
	// for a model loading on demand whose load time is not known yet).
	RetryAfter time.Duration
	// ColdStartWait is how long a request for a model loaded on demand
	// that has no ready replica waits for one before it gets 503 with
	// Retry-After; negative answers at once.
	ColdStartWait time.Duration
	// StreamIdleTimeout ends a stream whose engine sent nothing for this
	// long with an error event; negative never does.
	StreamIdleTimeout time.Duration
	// MaxNotesPerAgent bounds the memory notes one agent of a project
	// holds; a new note beyond it is refused.
	MaxNotesPerAgent int
	// MaxNotesPerProject bounds them over all a project's agents (agent
	// ids are the client's to choose).
	MaxNotesPerProject int
	// Logger receives one debug line per request; nil discards.
	Logger *slog.Logger
}

// Deps are the gateway's collaborators. Catalog, Auth and Routes are
// required; the rest are optional.
type Deps struct {
	Catalog Catalog
	// Auth authenticates keys; when nil every request is refused with 401.
	Auth   Auth
	Routes Routes
	// Admission admits requests against limits and budgets; nil admits all.
	Admission Admission
	// Observer receives a Record per inference request; nil discards.
	Observer Observer
	// Content keeps what projects that opted in keep: stored responses
	// (/v1/responses with store) and threads; nil keeps none.
	Content Content
	// Ready reports whether this process serves (leader, caches warm);
	// /ready answers 503 when it returns false. Nil means always ready.
	Ready func() bool
}

// Gateway is the client API handler.
type Gateway struct {
	cfg       Config
	deps      Deps
	log       *slog.Logger
	transport *upstream
	handler   http.Handler
	// inflight counts inference requests not yet reported to the Observer.
	inflight sync.WaitGroup
	// fits holds what length refusals of engines told (threads_fit.go).
	fits fitMemory
	// threadTurnsLost counts turns answered but not stored in their
	// thread (threads.go, notStored).
	threadTurnsLost atomic.Int64
	// threadWriteTimeout bounds the store work that keeps a thread's
	// turn (ThreadWriteTimeout; tests shorten it).
	threadWriteTimeout time.Duration
}

// New returns a gateway. Call Close when it is no longer used.
func New(cfg Config, deps Deps) *Gateway {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ResponseHeaderTimeout <= 0 {
		cfg.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if cfg.GenerationTimeout <= 0 {
		cfg.GenerationTimeout = DefaultGenerationTimeout
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.ColdStartWait == 0 {
		cfg.ColdStartWait = DefaultColdStartWait
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if cfg.MaxNotesPerAgent <= 0 {
		cfg.MaxNotesPerAgent = DefaultMaxNotesPerAgent
	}
	if cfg.MaxNotesPerProject <= 0 {
		cfg.MaxNotesPerProject = DefaultMaxNotesPerProject
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Admission == nil {
		deps.Admission = AdmitAll{}
	}
	g := &Gateway{
		cfg:       cfg,
		deps:      deps,
		log:       cfg.Logger.With("component", "gateway"),
		transport: newUpstream(cfg.ResponseHeaderTimeout),

		threadWriteTimeout: ThreadWriteTimeout,
	}
	mux := http.NewServeMux()
	for _, rt := range g.routeTable() {
		mux.Handle(rt.pattern, rt.handler)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newError(http.StatusNotFound, typeInvalidRequest, "unknown_url",
			fmt.Sprintf("unknown URL: %s %s", r.Method, r.URL.Path)))
	})
	g.handler = withRequestID(g.withBodyDeadline(mux))
	return g
}

// route is one path of the client API.
type route struct {
	pattern string
	// spends is set for a route whose requests can reach an engine; it
	// was made by spending, so each of its requests is admitted and
	// settled.
	spends  bool
	handler http.Handler
}

// routeTable is every path the gateway serves: New registers these and
// nothing else. A route whose requests can reach an engine (and so cost
// something) must be made with spending; TestEveryRouteCounts sends a
// request to each route of this table and fails when one reaches an
// engine without admission and settlement.
func (g *Gateway) routeTable() []route {
	plain := func(pattern string, h http.HandlerFunc) route { return route{pattern: pattern, handler: h} }
	return []route{
		g.spending("/v1/chat/completions", g.serveInference),
		g.spending("/v1/completions", g.serveInference),
		g.spending("/v1/embeddings", g.serveInference),
		g.spending("/v1/messages", g.serveMessages),
		plain("/v1/messages/", g.serveMessagesUnknown),
		g.spending("/v1/responses", g.serveResponses),
		plain("/v1/responses/", g.serveResponse),
		plain("/v1/threads/", g.serveThreadDelete),
		plain("/v1/memory", g.serveMemory),
		plain("/v1/memory/", g.serveMemory),
		{pattern: "/mcp", handler: g.mcpHandler()},
		plain("/v1/models", g.serveModels),
		plain("/v1/models/", g.serveModel),
		plain("/health", g.serveHealth),
		plain("/ready", g.serveReady),
	}
}

// spending makes the route of a handler whose requests can reach an
// engine. The route owns the request's exchange: it reports the request to
// the Observer when it ends and settles the ticket admission gave it (see
// admit), with what the request used; proxy forwards nothing without a
// ticket. So no request reaches an engine unadmitted or ends unsettled,
// whichever route it came by.
func (g *Gateway) spending(pattern string, h func(http.ResponseWriter, *http.Request, *exchange)) route {
	return route{pattern: pattern, spends: true, handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.inflight.Add(1)
		defer g.inflight.Done()
		x := &exchange{start: time.Now()}
		x.rec.Endpoint = r.URL.Path
		x.rec.RequestID = w.Header().Get(requestIDHeader)
		defer g.finish(x)
		defer x.settle()
		h(w, r, x)
	})}
}

// Handler returns the HTTP handler serving the client API.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Wait blocks until every inference request in progress has ended and
// been reported to the Observer, or ctx ends. A clean shutdown calls it
// after the HTTP server stopped accepting requests, before the Observer's
// last flush.
func (g *Gateway) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close releases idle upstream connections.
func (g *Gateway) Close() { g.transport.CloseIdleConnections() }

const requestIDHeader = "X-Request-Id"

// withRequestID gives every response an x-request-id: the client's own when
// it is a sane token, else a fresh one.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set(requestIDHeader, id)
		next.ServeHTTP(w, r)
	})
}

// withBodyDeadline gives every request that has a body BodyTimeout, from
// the end of its headers, for the body to arrive. It is the connection's
// read deadline, so net/http's own reading of a body the handler left
// unread (before the answer and after the handler, up to 256 KiB) is
// bounded too. Once the body has been read to its end the deadline is
// lifted (net/http does so itself when it starts its background read,
// which notices a client leaving; readBodyInTime does so as well), so an
// answer may take as long as it takes. A request without a body sets no
// deadline.
func (g *Gateway) withBodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// timedBody notes whether reading the body ended at the read deadline.
type timedBody struct {
	io.ReadCloser
	timedOut bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		b.timedOut = true
	}
	return n, err
}

// readBodyInTime reads the body under the deadline withBodyDeadline set
// and lifts the deadline once the body is in. A body that did not arrive
// in time gets 408 and the connection is closed (what is left of the body
// would be read as the next request).
func (g *Gateway) readBodyInTime(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	tb := &timedBody{ReadCloser: r.Body}
	r.Body = tb
	body, aerr := readBody(w, r, g.cfg.MaxBodyBytes)
	if tb.timedOut {
		w.Header().Set("Connection", "close")
		return nil, newError(http.StatusRequestTimeout, typeInvalidRequest, "request_timeout",
			fmt.Sprintf("the request body did not arrive within %s (timeouts.client_body)", g.cfg.BodyTimeout))
	}
	if aerr != nil {
		return nil, aerr
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, nil
}

// unreadGrace is how long, after a refusal that leaves the body unread,
// net/http may go on reading it (up to 256 KiB) before the connection
// closes. A client that writes its whole body before reading its answer
// (many do) would otherwise have its write reset and never see the
// answer; a client that never sends its body holds the connection this
// long after the answer, not longer.
const unreadGrace = 500 * time.Millisecond

// closeUnread ends a request whose body will not be read: the answer
// says Connection: close, so net/http does not read the body before
// sending it and does not keep the connection, and the read deadline is
// moved to at most unreadGrace from now, which bounds net/http's read of
// the body after the handler returns.
func (g *Gateway) closeUnread(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	if r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(min(unreadGrace, g.cfg.BodyTimeout)))
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !requestIDByte(id[i]) {
			return false
		}
	}
	return true
}

// requestIDByte reports whether c may appear in a client's request id:
// an ASCII letter or digit, '-', '_' or '.'.
func requestIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// newRequestID returns 128 random bits in hex. A request id names a
// request in logs and answers and grants nothing, so it comes from the
// runtime's generator (ChaCha8, seeded from the system), without the
// system call crypto/rand makes per read.
func newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, newError(http.StatusMethodNotAllowed, typeInvalidRequest, "method_not_allowed",
		fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, allow)))
}

type connAuthKey struct{}

// WithConnAuthenticated returns ctx carrying f, which the gateway calls
// each time a request whose context derives from ctx authenticates. The
// server sets it for every client connection (http.Server.ConnContext) to
// tell connections that have authenticated from those that have not.
func WithConnAuthenticated(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, connAuthKey{}, f)
}

// authenticate checks the Authorization header. It decides before the
// body is read; on failure the connection is closed after the answer
// without waiting for the body (closeUnread).
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) (request.Principal, *apiError) {
	p, aerr := g.checkKey(r)
	if aerr != nil {
		g.closeUnread(w, r)
		return p, aerr
	}
	if f, ok := r.Context().Value(connAuthKey{}).(func()); ok {
		f()
	}
	return p, nil
}

// checkKey authenticates the Authorization header's key.
func (g *Gateway) checkKey(r *http.Request) (request.Principal, *apiError) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return request.Principal{}, newError(http.StatusUnauthorized, typeAuthentication, "invalid_api_key",
			"missing API key: send it as Authorization: Bearer <key>")
	}
	if g.deps.Auth == nil {
		return request.Principal{}, newError(http.StatusUnauthorized, typeAuthentication, "invalid_api_key",
			"no authenticator is configured on this gateway")
	}
	p, err := g.deps.Auth.Authenticate(r.Context(), token)
	if errors.Is(err, request.ErrUnauthenticated) {
		return request.Principal{}, newError(http.StatusUnauthorized, typeAuthentication, "invalid_api_key",
			"invalid API key")
	}
	if err != nil {
		g.log.Warn("authenticating request", "err", err)
		return request.Principal{}, newError(http.StatusInternalServerError, typeServer, "",
			"the API key could not be checked; try again")
	}
	return p, nil
}

// exchange is one inference request on its way through the gateway.
type exchange struct {
	rec      request.Record
	start    time.Time
	usage    request.Usage
	injected bool // the gateway asked the engine for a usage chunk
	// events counts the content events relayed to the client, and
	// promptEstimate is the prompt estimate: what an abandoned stream is
	// charged when the engine never reports usage.
	events         int
	promptEstimate int
	// promptTypical is what the prompt is billed when the engine reported
	// no usage (request.TypicalPromptTokens).
	promptTypical int
	// sent is set once the request went to the engine.
	sent bool
	// sentAt is when the request was handed to the engine (the last
	// attempt's) and inHand when the engine's answer, or a stream's first
	// event, was in hand: Record.Own leaves out what lies between
	// (firstByte).
	sentAt, inHand time.Time
	// answered is set when the engine's headers for a non-streamed request
	// came back 200: it has generated, whatever happens to the body.
	answered bool
	// done is set once the engine's final [DONE] event reached the client:
	// the answer is whole, whatever the connection does next.
	done bool
	// ticket is admission's claim for the request, settled when it ends;
	// settled is set once it was.
	ticket  request.Ticket
	settled bool
	rated   bool // its x-ratelimit-* headers are written (rateHeaders)
	// bound holds a stream to the completion tokens per choice the ticket
	// reserved (see stream.go); 0 leaves it unbounded.
	bound streamBound
	// shape is the client API translated onto the engine's chat
	// completions (translate.go); nil when the request is passed through.
	shape shape
	// model is the catalog's entry for the name looked, the one lookup
	// of the catalog a request makes (lookup).
	model  request.Model
	looked string
	// refit, when set, is the body to send again after the engine
	// refused the body sent (its 400 answer) for its length, or nil; it
	// is called once (threads: threadShape.shrink). resent is the body
	// it made, which a retry on another replica sends.
	refit  func(engineBody []byte) []byte
	resent []byte
	// fitReplica, when set, is the body to send to a replica, or nil to
	// send the one in hand (threads: threadShape.forReplica).
	fitReplica func(replica string) []byte
	// beforeDone, when set, is called once, when a streamed chat answer
	// is whole, before its [DONE] is sent: it returns bytes to send
	// before it (threads: a comment line, the turn could not be stored).
	beforeDone func() []byte
	// lease is the replica's, while an attempt holds it (forward
	// releases it; a thread's answer, once whole, before its store
	// write: Lease.Done is once only).
	lease router.Lease
}

// firstByte notes the client's first byte sent: the gateway's own time
// until then, without the engine's, is Record.Own. Only the first call
// counts.
func (x *exchange) firstByte() {
	if x.rec.Own == 0 && !x.sentAt.IsZero() && !x.inHand.IsZero() {
		x.rec.Own = x.sentAt.Sub(x.start) + time.Since(x.inHand)
	}
}

// endAnswer runs beforeDone, once.
func (x *exchange) endAnswer() []byte {
	f := x.beforeDone
	x.beforeDone = nil
	if f == nil {
		return nil
	}
	return f()
}

// lookup returns the catalog's entry for a model name. The catalog is
// asked once per request: a shape that looked the name up before the
// body was parsed (threads) leaves the answer here.
func (x *exchange) lookup(g *Gateway, name string) (request.Model, bool) {
	if x.model.Name != "" && x.looked == name {
		return x.model, true
	}
	m, ok := g.deps.Catalog.Lookup(name)
	if ok {
		x.model, x.looked = m, name
	}
	return m, ok
}

// rateHeaders writes the ticket's x-ratelimit-* headers into h, once:
// while the engine works on the request (attempt), or before an answer
// the gateway writes itself (fail).
func (x *exchange) rateHeaders(h http.Header) {
	if x.ticket != nil && !x.rated {
		x.rated = true
		x.ticket.SetHeaders(h)
	}
}

// settle settles the request's ticket, once, with what it used.
func (x *exchange) settle() {
	if x.ticket != nil && !x.settled {
		x.settled = true
		x.usage = x.ticket.Settle(x.finalUsage())
	}
}

func (x *exchange) fail(w http.ResponseWriter, e *apiError) {
	x.rec.Status = e.status
	x.rateHeaders(w.Header())
	if x.shape != nil {
		x.shape.writeError(w, x, e)
		return
	}
	writeError(w, e)
}

// serveInference handles the chat, completions and embeddings endpoints;
// a chat completion that names a thread continues it (threads.go).
func (g *Gateway) serveInference(w http.ResponseWriter, r *http.Request, x *exchange) {
	if id := r.Header.Get(threadHeader); id != "" {
		if r.URL.Path != "/v1/chat/completions" {
			g.closeUnread(w, r)
			x.fail(w, newError(http.StatusBadRequest, typeInvalidRequest, "unsupported_header",
				fmt.Sprintf("x-llmgw-thread is read on /v1/chat/completions, /v1/messages and /v1/responses, not on %s", r.URL.Path)))
			return
		}
		x.shape = newThreadShape(r, id)
	}
	g.serve(w, r, x)
}

// serve is the path of every spending route: authentication, the body
// (turned into a chat completions body by x.shape when the route
// translates another API), the model, admission, a replica, the engine.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, x *exchange) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		x.fail(w, newError(http.StatusMethodNotAllowed, typeInvalidRequest, "method_not_allowed",
			fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, http.MethodPost)))
		return
	}
	p, aerr := g.authenticate(w, r)
	if aerr != nil {
		x.fail(w, aerr)
		return
	}
	x.rec.Principal = p
	body, aerr := g.readBodyInTime(w, r)
	if aerr != nil {
		x.fail(w, aerr)
		return
	}
	if x.shape != nil {
		if body, aerr = x.shape.toChat(r.Context(), g, x, body); aerr != nil {
			x.fail(w, aerr)
			return
		}
	}
	req, aerr := parseRequest(body)
	if aerr != nil {
		x.fail(w, aerr)
		return
	}
	isEmbeddings := r.URL.Path == "/v1/embeddings"
	x.rec.Stream = req.stream && !isEmbeddings
	terms, ok := x.lookup(g, req.model)
	if !ok {
		x.fail(w, newError(http.StatusNotFound, typeInvalidRequest, "model_not_found",
			fmt.Sprintf("the model %q does not exist", req.model)).withParam("model"))
		return
	}
	model := terms.Name
	x.rec.Model = model
	if !isEmbeddings {
		if aerr := req.checkLimits(terms.Limits); aerr != nil {
			x.fail(w, aerr)
			return
		}
	}
	// A thread's history is read once admitted: admission counts its
	// size (unreadBytes).
	bodyBytes := len(body) + unreadBytes(x.shape)
	x.promptEstimate = request.EstimatePromptTokens(bodyBytes, req.tokenIDs)
	x.promptTypical = request.TypicalPromptTokens(bodyBytes, req.tokenIDs)

	ticket, ok := g.admit(w, r, x, p, model, request.Info{
		Endpoint: r.URL.Path, Stream: x.rec.Stream, MaxTokens: req.maxTokens, N: req.n, BestOf: req.bestOf,
		Prompts: req.prompts, BodyBytes: bodyBytes,
		PromptEstimate: x.promptEstimate, Model: terms,
	})
	if !ok {
		return
	}
	// The completion the engine is told: admission's bound (the client's
	// max_tokens, or the default it set), else the client's own.
	forwarded := cmp.Or(ticket.MaxTokens(), req.maxTokens)
	if rf, ok := x.shape.(refitter); ok {
		// The shape fits its body to the model that serves (a budget's
		// fallback may hold less; never larger than what was admitted)
		// and to the completion forwarded.
		limits := terms.Limits
		if x.rec.Requested != "" {
			limits = g.servedLimits(ticket, x.rec.Model)
		}
		fitted, freq, aerr := rf.refit(r.Context(), g, limits, forwarded)
		if aerr != nil {
			x.fail(w, aerr)
			return
		}
		if fitted != nil {
			body, req = fitted, freq
			// Billed as what is sent when the engine counts nothing.
			x.promptEstimate = request.EstimatePromptTokens(len(body), req.tokenIDs)
			x.promptTypical = request.TypicalPromptTokens(len(body), req.tokenIDs)
		}
	}
	model = x.rec.Model
	if x.rec.Stream {
		x.bound = streamBound{perChoice: ticket.MaxTokens(), clientUsage: req.includeUsage}
	}

	x.injected = x.rec.Stream && !req.includeUsage
	key := req.affinityKey(body, isEmbeddings)
	body, err := req.rewrite(body, model, x.injected, ticket.MaxTokens())
	if err != nil {
		g.log.Warn("rewriting request body", "model", model, "err", err)
		x.fail(w, newError(http.StatusInternalServerError, typeServer, "", "the request could not be forwarded"))
		return
	}
	if sh, ok := x.shape.(shrinker); ok {
		// A body fitted again is sent as the first was.
		reshaped := func(fitted []byte) []byte {
			freq, aerr := parseRequest(fitted)
			if aerr != nil {
				return nil
			}
			out, err := freq.rewrite(fitted, model, x.injected, ticket.MaxTokens())
			if err != nil {
				return nil
			}
			// Billed as what is now sent when the engine counts nothing.
			x.promptEstimate = request.EstimatePromptTokens(len(fitted), freq.tokenIDs)
			x.promptTypical = request.TypicalPromptTokens(len(fitted), freq.tokenIDs)
			return out
		}
		x.refit = func(engineBody []byte) []byte {
			fitted, learned := sh.shrink(engineBody, forwarded)
			if learned != nil {
				g.fits.learn(p.Project, model, x.rec.ReplicaID, sh.threadID(), *learned)
			}
			if fitted == nil {
				return nil
			}
			x.resent = reshaped(fitted)
			return x.resent
		}
		x.fitReplica = func(replica string) []byte {
			if fitted := sh.forReplica(&g.fits, model, replica, forwarded); fitted != nil {
				return reshaped(fitted)
			}
			return nil
		}
	}
	g.forward(w, r, x, model, key, body)
}

// shrinker is a shape that can send a shorter body after the engine
// refused one for its length, and fit its body to the replica it goes
// to (threads).
type shrinker interface {
	shrink(engineBody []byte, maxTokens int) ([]byte, *engineFit)
	forReplica(fits *fitMemory, model, replica string, maxTokens int) []byte
	threadID() string
}

// admit asks admission for a ticket for the request and gives it to the
// exchange, which settles it when the request ends and writes its
// headers (rateHeaders); when a budget's fallback serves the request, it
// sets the record's model. A refusal is answered here: ok is false.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, x *exchange, p request.Principal, model string, info request.Info) (request.Ticket, bool) {
	ticket, err := g.deps.Admission.Admit(r.Context(), p, model, info)
	if err != nil {
		if rej, ok := errors.AsType[*request.Rejection](err); ok {
			x.rec.Admission = rej.Reason
			if x.rec.Admission == "" {
				x.rec.Admission = rej.Code
			}
			for k, v := range rej.Header {
				w.Header()[k] = v
			}
			x.fail(w, newError(rej.Status, rej.Type, rej.Code, rej.Message).withRetryAfter(rej.RetryAfter))
			return nil, false
		}
		g.log.Warn("admitting request", "model", model, "err", err)
		x.fail(w, newError(http.StatusInternalServerError, typeServer, "", "the request could not be admitted; try again"))
		return nil, false
	}
	x.ticket = ticket // its x-ratelimit-* headers: rateHeaders, while the engine works
	if served := ticket.Model(); served != model {
		x.rec.Requested = model
		x.rec.Model = served
	}
	return ticket, true
}

// servedTerms is implemented by a ticket that knows the catalog's entry
// of the model serving it (a budget's fallback, which admission looked up).
type servedTerms interface {
	Served() request.Model
}

// servedLimits returns the limits of the model a ticket serves when it is
// not the one asked for: from the ticket when it knows them, else from the
// catalog (a fallback's lookup).
func (g *Gateway) servedLimits(t request.Ticket, model string) request.Limits {
	if st, ok := t.(servedTerms); ok {
		if m := st.Served(); m.Name == model {
			return m.Limits
		}
	}
	m, _ := g.deps.Catalog.Lookup(model)
	return m.Limits
}

// finalUsage returns the request's usage once it has ended. When the engine
// never sent its count but output was relayed (the client left mid-stream),
// it charges what was relayed rather than nothing.
func (x *exchange) finalUsage() request.Usage {
	switch {
	case x.usage.Reported || x.usage.Estimated || x.usage.Abandoned:
	case x.events > 0:
		x.usage = request.Usage{PromptTokens: x.promptTypical, CompletionTokens: x.events, Estimated: true}
		x.usage.TotalTokens = x.usage.PromptTokens + x.usage.CompletionTokens
	case x.sent && x.rec.Status == statusClientGone,
		// The engine answered but its body never came whole (a generation
		// timeout, a cut connection) or held no usage: it did the work,
		// so the reservation is charged rather than nothing.
		x.answered:
		x.usage = request.Usage{PromptTokens: x.promptEstimate, Abandoned: true}
	}
	return x.usage
}

// finish logs and reports a finished inference request.
func (g *Gateway) finish(x *exchange) {
	x.rec.Latency = time.Since(x.start)
	x.finalUsage()
	x.rec.PromptTokens = x.usage.PromptTokens
	x.rec.CompletionTokens = x.usage.CompletionTokens
	x.rec.UsageReported = x.usage.Reported
	x.rec.UsageEstimated = x.usage.Estimated || x.usage.Abandoned
	x.rec.Priced, x.rec.Cost, x.rec.Admitted = x.usage.Priced, x.usage.Cost, x.usage.Admitted
	if g.log.Enabled(context.Background(), slog.LevelDebug) {
		g.log.Debug("request", "request_id", x.rec.RequestID, "endpoint", x.rec.Endpoint,
			"model", x.rec.Model, "replica", x.rec.ReplicaID, "status", x.rec.Status,
			"stream", x.rec.Stream, "latency", x.rec.Latency,
			"prompt_tokens", x.rec.PromptTokens, "completion_tokens", x.rec.CompletionTokens)
	}
	if g.deps.Observer != nil {
		g.deps.Observer.Observe(x.rec)
	}
}
