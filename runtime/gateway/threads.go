package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/runtime/apishape"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
)

// Threads: a client sends x-llmgw-thread and only its new turn; the
// gateway puts the stored conversation before it, fitted to the model
// that serves, and keeps the turn and the answer after it. Only for a
// project that keeps conversations (llmgw keys threads).
const (
	threadHeader        = "X-Llmgw-Thread"
	threadTrimmedHeader = "X-Llmgw-Thread-Trimmed"
	// threadUnsavedHeader says, on an answer that was not stored in its
	// thread, why.
	threadUnsavedHeader = "X-Llmgw-Thread-Unsaved"
)

// ThreadContent is what threads need of the store.
type ThreadContent interface {
	GetThread(ctx context.Context, project, id string, now time.Time) (store.Thread, error)
	ThreadSize(ctx context.Context, project, id string, now time.Time) (int64, error)
	PutThread(ctx context.Context, project, id string, messages []byte, expires time.Time, prev int64, turnKey string) (int64, error)
	DeleteThread(ctx context.Context, project, id string) error
}

// refitter is a shape whose body depends on the model that serves and
// the completion forwarded: once admitted it is built again for them
// (nil: the body stands).
type refitter interface {
	refit(ctx context.Context, g *Gateway, limits request.Limits, maxTokens int) ([]byte, *parsedBody, *apiError)
}

// unreadBytes is what a shape's body will hold, once admitted, beyond
// the body admission sees (a thread's history: the thread is read only
// once a request is admitted, so that a refused one costs no read of
// it); admission counts it in the body's size and prompt estimate.
func unreadBytes(sh shape) int {
	if u, ok := sh.(interface{ unreadBytes() int }); ok {
		return u.unreadBytes()
	}
	return 0
}

func (g *Gateway) threads() ThreadContent {
	tc, _ := g.deps.Content.(ThreadContent)
	return tc
}

// threadShape is one chat completion on a thread: the body is the
// engine's, with the history put in; the answer is the engine's.
type threadShape struct {
	id      string
	project string
	retain  int
	// top is the request body's top level; history the thread so far and
	// turn the messages the client sent.
	top     map[string]json.RawMessage
	history []json.RawMessage
	// revision is the stored thread's when it was read, 0 for none.
	revision int64
	// unread is the size of the stored thread, in bytes, until it is
	// read (after admission).
	unread int
	// sendable is the part of history a body may hold: no more than the
	// size admission counted (unread, when it counted it); capped the
	// turns it leaves out (the thread grew between).
	sendable []json.RawMessage
	capped   int
	turn     []json.RawMessage
	// kept is the history of the last body fitted, trimmed the turns it
	// left out of it.
	kept    []json.RawMessage
	trimmed int
	// overhead is the estimate of what of the body, beside its messages,
	// the engine counts in the prompt (tools); sent the estimate of the
	// last body fitted (its messages and overhead), fitted the budget it
	// was fitted to.
	overhead int
	sent     int
	fitted   int
	// context is the catalog context_length of the model that serves (0
	// when not known).
	context int
	// shrunk is set once the thread was fitted again after the engine
	// refused its length.
	shrunk bool
	// acc reads a streamed answer.
	acc apishape.Accumulator
	// admitted is the budget (estimated tokens, 0 for none) the body that
	// admission saw was fitted to: a fallback's body never holds more;
	// base is the budget for the model that serves and the completion
	// forwarded (no more than admitted).
	admitted, base int
	// unsaved, when set, says why this turn could not be stored.
	unsaved string
	// fittable is set once the body was read as a chat body and fitted
	// (else parseRequest says what is wrong with it, and it is left so).
	fittable bool
	// turnKey is the request's Idempotency-Key, hashed ("" for none),
	// stored with its turn. replaced is set when the thread's last turn
	// was this request's, stored by an earlier attempt of it: its answer
	// is replaced (retried).
	turnKey  string
	replaced bool
}

// newThreadShape is the shape of a request on thread id, with the
// Idempotency-Key it carries.
func newThreadShape(r *http.Request, id string) *threadShape {
	s := &threadShape{id: id}
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		sum := sha256.Sum256([]byte(k))
		s.turnKey = hex.EncodeToString(sum[:16])
	}
	return s
}

// retried returns a stored thread (msgs, stored with the last turn's
// key) without its last turn when that turn is this request's, stored
// by an earlier attempt of it whose answer the client did not get (a
// timeout, a connection lost): then this attempt's answer replaces
// that one, rather than the turn being stored twice. It is this
// request's when the last turn is the same messages as this one's turn
// and the request carries the Idempotency-Key that turn was stored
// with. Nothing else says so: an SDK's retry count
// (X-Stainless-Retry-Count) is the same on the retry of a request
// refused before it was stored (a 429, a 503) whose turn repeats the
// one before it, whose answer the client did get; a turn sent again
// without the key is a new turn, kept after the same one (a turn
// stored twice can be told and mended, an answer lost cannot).
func (s *threadShape) retried(msgs []json.RawMessage, key string) ([]json.RawMessage, bool) {
	if s.turnKey == "" || key != s.turnKey {
		return msgs, false
	}
	return apishape.WithoutLastTurn(msgs, s.turn)
}

func (s *threadShape) toChat(ctx context.Context, g *Gateway, x *exchange, body []byte) ([]byte, *apiError) {
	if !validRequestID(s.id) {
		return nil, newError(http.StatusBadRequest, typeInvalidRequest, "invalid_thread",
			"x-llmgw-thread must be 1 to 128 letters, digits, '-', '_' or '.'")
	}
	project := x.rec.Principal.Project
	s.project = project
	tc := g.threads()
	off := newError(http.StatusBadRequest, typeInvalidRequest, "threads_off",
		fmt.Sprintf("project %q does not keep conversations, so x-llmgw-thread cannot be used; an operator turns it on with llmgw keys threads --project %s --retain-hours N", project, project))
	if tc == nil {
		return nil, off
	}
	hours, err := g.deps.Content.Retention(ctx, project, store.ContentThreads)
	if err != nil {
		g.log.Warn("reading content retention", "project", project, "err", err)
		return nil, newError(http.StatusInternalServerError, typeServer, "", "the project's settings could not be read; try again")
	}
	if hours <= 0 {
		return nil, off
	}
	s.retain = hours
	if err := json.Unmarshal(body, &s.top); err != nil || s.top == nil {
		return body, nil // parseRequest says what is wrong with it
	}
	if err := json.Unmarshal(s.top["messages"], &s.turn); err != nil {
		return body, nil
	}
	var n int
	if json.Unmarshal(s.top["n"], &n) == nil && n > 1 {
		// A thread continues with one answer; which of n would it keep?
		return nil, newError(http.StatusBadRequest, typeInvalidRequest, "unsupported_value",
			fmt.Sprintf("n is %d; a request on a thread (x-llmgw-thread) asks for one answer: leave n out or send 1", n)).withParam("n")
	}
	// Admission comes before the thread is read: it is told the
	// thread's size (unreadBytes), which the store knows without
	// reading it, so a request it refuses costs no read or decoding of
	// a thread of any size.
	size, err := tc.ThreadSize(ctx, project, s.id, time.Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		g.log.Warn("reading thread", "project", project, "err", err)
		return nil, newError(http.StatusInternalServerError, typeServer, "", "the thread could not be read; try again")
	default:
		s.unread = int(min(size, math.MaxInt32))
	}
	// Tools are read by the engine as part of the prompt: they take room
	// in the context the history is fitted to.
	for _, k := range []string{"tools", "functions"} {
		if v := s.top[k]; len(v) > 0 {
			s.overhead += apishape.EstimateTokens(v)
		}
	}
	var model string
	_ = json.Unmarshal(s.top["model"], &model)
	// The one lookup of the request; serve finds it on the exchange.
	var limits request.Limits
	m, ok := x.lookup(g, model)
	if ok {
		limits = m.Limits
	}
	s.context = limits.ContextLength
	s.admitted = budgetOf(limits, cmp.Or(requestedBound(s.top), limits.MaxOutput))
	s.base = s.admitted
	s.fittable = true
	return s.fit(s.admitted), nil
}

// unreadBytes is the stored thread's size until it is read: at most
// what its history adds to the body (what fit sends of it is never
// longer), and admission's prompt bound is no more than the model's
// context whatever it is.
func (s *threadShape) unreadBytes() int { return s.unread }

// read reads the stored thread, once admitted. What is sent of it is
// never more than the size admission counted (admitted): another turn
// of the thread stored between the size and the read (two requests at
// once) would else reach the engine unreserved, so unbilled.
func (s *threadShape) read(ctx context.Context, g *Gateway) *apiError {
	admitted := s.unread
	s.unread = 0
	stored, err := g.threads().GetThread(ctx, s.project, s.id, time.Now())
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		g.log.Warn("reading thread", "project", s.project, "err", err)
		return newError(http.StatusInternalServerError, typeServer, "", "the thread could not be read; try again")
	default:
		s.revision = stored.Revision
		if err := json.Unmarshal(stored.Messages, &s.history); err != nil {
			g.log.Warn("decoding thread", "project", s.project, "err", err)
			return newError(http.StatusInternalServerError, typeServer, "", "the thread could not be read")
		}
		// A retry is sent the thread without its own earlier attempt.
		s.history, s.replaced = s.retried(s.history, stored.TurnKey)
	}
	s.sendable, s.capped = apishape.AdmittedHistory(s.history, s.turn, admitted)
	if s.capped > 0 {
		g.log.Info("thread grew after admission; sending what was admitted", "project", s.project, "admitted_bytes", admitted, "turns_left_out", s.capped)
	}
	return nil
}

// requestedBound is the completion bound the body asks for, 0 if none.
func requestedBound(top map[string]json.RawMessage) int {
	for _, k := range []string{"max_completion_tokens", "max_tokens", "n_predict"} {
		var v int
		if json.Unmarshal(top[k], &v) == nil && v > 0 {
			return v
		}
	}
	return 0
}

// budgetOf is what a model's context holds beside the completion, in
// estimated tokens; 0 when the model's context length is not known.
func budgetOf(l request.Limits, maxTokens int) int {
	if l.ContextLength <= 0 {
		return 0
	}
	if maxTokens <= 0 {
		maxTokens = l.MaxOutput
	}
	return max(l.ContextLength-maxTokens, 1)
}

// fit builds the body for a budget (the whole prompt's, in estimated
// tokens; 0 for none): the history, trimmed to what the budget leaves
// beside the overhead, then the turn.
func (s *threadShape) fit(budget int) []byte {
	msgBudget := budget
	if budget > 0 {
		msgBudget = max(budget-s.overhead, 1)
	}
	var msgs []json.RawMessage
	msgs, s.kept, s.trimmed = apishape.MergeThread(s.sendable, s.turn, msgBudget)
	s.trimmed += s.capped
	s.fitted = budget
	s.sent = s.overhead
	for _, m := range msgs {
		s.sent += apishape.EstimateTokens(m)
	}
	// Not HTML-escaped (json.Marshal writes '<', '>' and '&' as six
	// bytes each): the history sent is never longer than it is stored.
	s.top["messages"], _ = apishape.EncodeThread(msgs)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s.top)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// refit fits the thread, once admitted, to the model that serves (the one
// named, or a budget's fallback) and the completion forwarded (maxTokens:
// the client's max_tokens, or the one admission set when the client sent
// none): to what that model holds beside it, and never to more than
// admission reserved for (the requested model's budget), so a fallback
// that holds more gets the same history and one that holds less gets
// less.
func (s *threadShape) refit(ctx context.Context, g *Gateway, limits request.Limits, maxTokens int) ([]byte, *parsedBody, *apiError) {
	if !s.fittable {
		return nil, nil, nil
	}
	if aerr := s.read(ctx, g); aerr != nil {
		return nil, nil, aerr
	}
	budget := budgetOf(limits, maxTokens)
	if s.admitted > 0 && (budget == 0 || budget > s.admitted) {
		budget = s.admitted
	}
	s.base, s.context = budget, limits.ContextLength
	body := s.fit(budget)
	req, aerr := parseRequest(body)
	return body, req, aerr
}

// forReplica fits the thread to the replica a request is about to be
// sent to, when the project learned from an earlier length refusal what
// that replica's engine holds, or the thread's tokens per estimated
// token on the model (fitMemory): the context it named (else the
// catalog's), less maxTokens (the completion forwarded; 0 when the
// engine chooses, within its context), at that rate (else one), with
// the margin. It returns the body, or nil when the one fitted last is
// the one to send.
func (s *threadShape) forReplica(fits *fitMemory, model, replica string, maxTokens int) []byte {
	if !s.fittable {
		return nil
	}
	budget := s.base
	limit, known := fits.limitOf(s.project, model, replica)
	ratio, rated := fits.ratioOf(s.project, s.id, model)
	if !known {
		limit = s.context
	}
	if (known || rated) && limit > 0 {
		if b := engineBudget(limit, maxTokens, ratio); budget == 0 || b < budget {
			budget = b
		}
	}
	if budget == s.fitted {
		return nil
	}
	return s.fit(budget)
}

// engineBudget is what an engine that holds limit tokens and counts
// ratio tokens per estimated token leaves for the prompt beside
// maxTokens, in estimated tokens, with the margin.
func engineBudget(limit, maxTokens int, ratio float64) int {
	room := limit - maxTokens
	if room <= 0 {
		room = limit / 2
	}
	return max(int(float64(room)/ratio*shrinkMargin), 1)
}

// shrinkMargin is the share of what the engine said fits that a thread
// fitted again is given: the history's older turns may count more
// tokens for their estimate than the whole did.
const shrinkMargin = 0.9

func (s *threadShape) threadID() string { return s.id }

func (s *threadShape) unsavedWhy() string { return s.unsaved }

// engineFit is what an engine's length refusal told: the context it
// holds (0 when it did not say) and its tokens per estimated token of
// what was sent (0 when it did not say).
type engineFit struct {
	limit int
	ratio float64
}

// shrink fits the thread again, once, after the engine refused the body
// it was sent (engineBody, a 400) for being longer than its context:
// the engine's tokens per estimated token are what it counted over what
// was sent, and the history is fitted to the context it named, less
// maxTokens (the completion forwarded), with a margin (when it names
// its context but not its count, the estimate is taken for its count).
// An engine that names no context gets three quarters of what was sent.
// It returns nil when the refusal is another, or when no more history
// can be dropped; and what the refusal told (nil when it was not a
// length refusal).
func (s *threadShape) shrink(engineBody []byte, maxTokens int) ([]byte, *engineFit) {
	cr, ok := apishape.ParseContextRefusal(engineBody)
	if s.shrunk || !ok || s.sent <= 0 {
		return nil, nil
	}
	learned := &engineFit{limit: cr.Limit}
	if cr.Prompt > 0 {
		learned.ratio = float64(cr.Prompt) / float64(s.sent)
	}
	s.shrunk = true
	budget := s.sent * 3 / 4
	if cr.Limit > 0 {
		room := cr.Limit - maxTokens
		if room <= 0 {
			room = cr.Limit / 2
		}
		if cr.Prompt > 0 {
			budget = int(float64(room) / learned.ratio * shrinkMargin)
		} else {
			// The engine's count is not known: as the estimate's, and
			// no less trimming than without a limit.
			budget = min(budget, int(float64(room)*shrinkMargin))
		}
	}
	budget = max(min(budget, s.sent-1), 1)
	before := s.trimmed
	body := s.fit(budget)
	if s.trimmed == before {
		return nil, learned
	}
	return body, learned
}

func (s *threadShape) writeError(w http.ResponseWriter, _ *exchange, e *apiError) { writeError(w, e) }

func (s *threadShape) setHeaders(h http.Header) {
	if s.trimmed > 0 {
		h.Set(threadTrimmedHeader, strconv.Itoa(s.trimmed))
	}
	if s.unsaved != "" {
		h.Set(threadUnsavedHeader, s.unsaved)
	}
}

// threadWrites bounds the writes of one turn's thread: another turn's
// write between this one's read and write makes it read again and
// append.
const threadWrites = 5

// ThreadWriteTimeout bounds the store work that keeps a thread's turn
// (its writes, and the reads after a conflict, all told). It runs before
// the answer's end is sent and while the replica is still held, so a
// stalled store must not hold either for long: past it, the turn counts
// as not stored (notStored) and the answer ends as usual.
const ThreadWriteTimeout = 5 * time.Second

// completed keeps the thread for the retention from now: the whole
// history as it was read (what was trimmed for this request's model
// included: trimming is for what is sent, not for what is kept), the
// turn and the answer, when the thread is still as this turn read it;
// the oldest turns fall out only when the thread would hold more than
// twice the serving model's context (threadMaxBytes). When another turn of the thread was
// stored meanwhile (two turns at once), this turn and its answer go
// after what that one stored: both land, in the order their answers
// ended. A thread deleted meanwhile is begun again with this turn only.
// A turn that cannot be stored (the store failing, or the thread
// changing on every try) is logged, counted, and said to the client
// (unsaved).
func (s *threadShape) completed(ctx context.Context, g *Gateway, x *exchange, res *apishape.Result) {
	// The engine's answer is whole: its replica is free for others
	// while the turn is stored.
	x.lease.Done()
	// Not cut short by the client leaving (its answer is whole), but
	// bounded: a cancelled write rolls back, so none lands later.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.threadWriteTimeout)
	defer cancel()
	project := x.rec.Principal.Project
	if x.usage.Reported && x.usage.PromptTokens > 0 && s.sent > 0 {
		// What the engine counted of what was sent keeps the thread's
		// rate up to date, when it is fitted to what a refusal told.
		g.fits.rated(project, s.id, x.rec.Model, x.rec.ReplicaID, float64(x.usage.PromptTokens)/float64(s.sent))
	}
	answer, err := json.Marshal(res.Message())
	if err != nil {
		s.notStored(g, project, "the answer could not be encoded", err)
		return
	}
	maxBytes := threadMaxBytes(s.context, g.cfg.MaxBodyBytes)
	msgs := apishape.CapThread(apishape.AppendTurn(s.history, s.turn, answer), maxBytes)
	prev := s.revision
	for range threadWrites {
		data, err := apishape.EncodeThread(msgs)
		if err != nil {
			s.notStored(g, project, "the thread could not be encoded", err)
			return
		}
		_, err = g.threads().PutThread(ctx, project, s.id, data, time.Now().Add(time.Duration(s.retain)*time.Hour), prev, s.turnKey)
		if !errors.Is(err, store.ErrConflict) {
			if err != nil {
				s.notStored(g, project, storeFailed(ctx, err, g.threadWriteTimeout), err)
			}
			return
		}
		// Another turn was stored since this one read the thread.
		cur, err := g.threads().GetThread(ctx, project, s.id, time.Now())
		var stored []json.RawMessage
		switch {
		case errors.Is(err, store.ErrNotFound):
			prev = 0
		case err != nil:
			s.notStored(g, project, storeFailed(ctx, err, g.threadWriteTimeout), err)
			return
		default:
			if err := json.Unmarshal(cur.Messages, &stored); err != nil {
				s.notStored(g, project, "the stored thread could not be read", err)
				return
			}
			// An earlier attempt of this request stored meanwhile:
			// this answer replaces its.
			stored, _ = s.retried(stored, cur.TurnKey)
			prev = cur.Revision
		}
		msgs = apishape.CapThread(apishape.AppendTurn(stored, s.turn, answer), maxBytes)
	}
	s.notStored(g, project, fmt.Sprintf("the thread changed on each of %d tries (other turns of it ending at once)", threadWrites), nil)
}

// threadContexts and threadBytesPerToken bound what a thread keeps:
// twice what the serving model's context holds, at about 4 bytes a
// token; what is sent is fitted to the context, so more would only be
// read, decoded and written again on every turn (before admission too).
const (
	threadContexts      = 2
	threadBytesPerToken = 4
)

// threadMaxBytes is the most a thread keeps, in bytes of its JSON:
// threadContexts × the serving model's context_length × threadBytesPerToken,
// max_body_bytes when the context is not known, and never more than it.
func threadMaxBytes(contextLength int, maxBody int64) int {
	bound := min(maxBody, math.MaxInt32)
	if contextLength > 0 {
		bound = min(bound, int64(contextLength)*threadBytesPerToken*threadContexts)
	}
	return int(bound)
}

// storeFailed says why a thread's store work failed: timed out (ctx,
// bounded by timeout, ended), or failed.
func storeFailed(ctx context.Context, err error, timeout time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return "the store did not answer within " + timeout.String()
	}
	return "the store failed"
}

// notStored records that this turn was not kept: a warning, the count
// (ThreadTurnsNotStored), and what the client is told.
func (s *threadShape) notStored(g *Gateway, project, why string, err error) {
	g.threadTurnsLost.Add(1)
	if err != nil {
		g.log.Warn("storing thread: this turn was not kept", "project", project, "why", why, "err", err)
	} else {
		g.log.Warn("storing thread: this turn was not kept", "project", project, "why", why)
	}
	s.unsaved = fmt.Sprintf("this turn and its answer were not kept in thread %s: %s; send the turn again to keep it", s.id, why)
}

// threadUnsavedComment tells a stream's client that its turn was not
// stored (why) as an SSE comment line, which official SDKs skip, so the
// answer stays a whole, good one; it is written just before an event's
// own lines, so it never makes an empty event of its own.
func threadUnsavedComment(why string) []byte {
	why = strings.NewReplacer("\r", " ", "\n", " ").Replace(why)
	return []byte(": llmgw thread_not_stored: " + why + "\n")
}

// streamAnswered keeps a passed-through stream's answer in its thread,
// once whole, before its [DONE] is sent: the events that came with the
// [DONE] were written but not flushed, and leave first, so the store
// write holds only the end; when the turn was not stored it returns
// the comment line that says so, to go before [DONE]. A client found
// gone by then (the flush fails) did not get the answer whole: the
// thread is left as it was, as for any stream the client left, and
// the writes after fail.
func (g *Gateway) streamAnswered(w http.ResponseWriter, r *http.Request, x *exchange, pt passthrough) []byte {
	if http.NewResponseController(w).Flush() != nil || r.Context().Err() != nil {
		return nil
	}
	pt.completed(r.Context(), g, x, pt.answer())
	if us, ok := pt.(interface{ unsavedWhy() string }); ok && us.unsavedWhy() != "" {
		return threadUnsavedComment(us.unsavedWhy())
	}
	return nil
}

// ThreadTurnsNotStored counts the turns on threads whose answer the
// client got but which could not be stored in the thread.
func (g *Gateway) ThreadTurnsNotStored() int64 { return g.threadTurnsLost.Load() }

// relayed reads the answer from the stream as the client gets it (the
// chunk past the stream's bound is not relayed, so not read).
func (s *threadShape) relayed(data []byte) {
	_, _ = s.acc.Chunk(data) // a chunk that is not JSON adds nothing
}

func (s *threadShape) answer() *apishape.Result { return &s.acc.Result }

// serveThreadDelete is DELETE /v1/threads/{id}: the client forgets one of
// its project's threads. Another project's answers as one that does not
// exist.
func (g *Gateway) serveThreadDelete(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/threads/")
	if r.Method != http.MethodDelete {
		methodNotAllowed(w, r, http.MethodDelete)
		return
	}
	p, aerr := g.authenticate(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	notFound := newError(http.StatusNotFound, typeInvalidRequest, "not_found", fmt.Sprintf("thread %q not found", id))
	tc := g.threads()
	if tc == nil || !validRequestID(id) {
		writeError(w, notFound)
		return
	}
	err := tc.DeleteThread(r.Context(), p.Project, id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, notFound)
		return
	}
	if err != nil {
		g.log.Warn("deleting thread", "project", p.Project, "err", err)
		writeError(w, newError(http.StatusInternalServerError, typeServer, "", "the thread could not be deleted; try again"))
		return
	}
	body, _ := json.Marshal(map[string]any{"id": id, "object": "thread.deleted", "deleted": true})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
