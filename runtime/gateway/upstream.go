package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/runtime/apishape"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

// statusClientGone is recorded when the client left before a response was
// sent (nginx's convention; never written to the wire).
const statusClientGone = 499

// maxBufferedResponse is the largest non-streamed response held in memory
// to read its usage; a larger one is relayed as it arrives and its usage is
// looked for in its tail.
const maxBufferedResponse = 32 << 20

// maxRefusalBytes bounds an engine's 400 answer read to tell whether it
// refused a thread's length.
const maxRefusalBytes = 1 << 20

// dialTimeout bounds connecting to an engine.
const dialTimeout = 3 * time.Second

// newTransport returns the transport for engines reached by anything but
// http:// (upconn.go keeps the http:// connections): HTTP/1.1 with many
// idle connections per engine, no compression (bytes are relayed as the
// engine wrote them).
func newTransport(headerTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   upstreamMaxIdlePerHost,
		IdleConnTimeout:       upstreamIdleTimeout,
		ResponseHeaderTimeout: headerTimeout,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		WriteBufferSize:       upstreamBufSize,
		ReadBufferSize:        upstreamBufSize,
	}
}

// relayedHeaders are the engine's response headers a client is sent: what
// the body is, and when to come back after a refusal. The rest are the
// engine's own (its Server, Date, CORS, cookies, caching hints for a POST
// answer no cache keeps, its request id) and the gateway answers for
// itself; every header written is one each client reads, and with these
// and the gateway's own (x-request-id, six x-ratelimit-*) a stream's
// answer keeps to the eight that net/http's header map holds without
// growing.
var relayedHeaders = [...]string{"Content-Type", "Retry-After"}

func copyResponseHeaders(dst, src http.Header) {
	for _, k := range relayedHeaders {
		if v, ok := src[k]; ok {
			dst[k] = v
		}
	}
}

// forward sends a request to one of the model's replicas and relays the
// answer. A connection to a replica that is refused, reset or closed before
// the replica answered anything takes that replica out of the routing table
// (passive health: it returns when its engine answers again) and the request
// goes to another replica, within the request's deadline. With no replica
// ready, a model loaded on demand is waited for up to ColdStartWait; then
// the client gets 503 with Retry-After.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, x *exchange, model string, key router.Key, body []byte) {
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.GenerationTimeout)
	defer cancel()
	var tried []string
	var lastErr error
	waited := false
	for {
		lease, err := g.deps.Routes.Route(model, router.Request{Key: key, Exclude: tried})
		if err != nil {
			nr, _ := errors.AsType[*router.NotReadyError](err)
			if nr != nil && nr.Loading && !waited && len(tried) == 0 && g.cfg.ColdStartWait > 0 {
				waited = true
				wctx, wcancel := context.WithTimeout(ctx, g.cfg.ColdStartWait)
				werr := g.deps.Routes.Wait(wctx, model)
				wcancel()
				if werr == nil {
					continue
				}
				if r.Context().Err() != nil {
					x.rec.Status = statusClientGone
					return
				}
				// Ask again: the answer carries the latest ETA. A replica
				// ready just now is picked by the next turn of the loop.
				var again router.Lease
				again, err = g.deps.Routes.Route(model, router.Request{Key: key})
				if err == nil {
					again.Done()
					continue
				}
				nr, _ = errors.AsType[*router.NotReadyError](err)
			}
			g.notRouted(w, x, model, err, nr, len(tried), lastErr)
			return
		}
		ep := lease.Endpoint()
		x.rec.ReplicaID = ep.ReplicaID
		if x.fitReplica != nil {
			if fitted := x.fitReplica(ep.ReplicaID); fitted != nil {
				body = fitted // fitted to what this replica's engine said it holds
			}
		}
		x.lease = lease // a thread's answer gives it back before its store write
		err = g.attempt(ctx, w, r, x, ep, body)
		if err == nil {
			lease.Done()
			return
		}
		// The replica failed before answering: out of the table, and the
		// request goes elsewhere while its deadline allows.
		lease.Fail()
		if x.resent != nil {
			body = x.resent // fitted again after a length refusal
		}
		lastErr = err
		tried = append(tried, ep.ReplicaID)
		g.log.Warn("replica failed before answering; trying another", "replica", ep.ReplicaID, "model", model, "err", err)
		if ctx.Err() != nil {
			g.upstreamFailed(w, r, x, ep, err)
			return
		}
	}
}

// notRouted answers a request no replica took.
func (g *Gateway) notRouted(w http.ResponseWriter, x *exchange, model string, err error, nr *router.NotReadyError, tried int, lastErr error) {
	switch {
	case tried > 0:
		x.fail(w, newError(http.StatusBadGateway, typeUpstream, "upstream_error",
			fmt.Sprintf("the model's replicas failed before answering (%d tried, the last: %s); retry the request", tried, connFailure(lastErr))))
	case nr != nil && nr.Loading:
		after := g.cfg.RetryAfter
		if !nr.ETA.IsZero() {
			after = max(time.Until(nr.ETA), time.Second)
		}
		x.fail(w, newError(http.StatusServiceUnavailable, typeUnavailable, "model_loading",
			fmt.Sprintf("model %q is loading on demand; retry after %s", model, after.Round(time.Second))).withRetryAfter(after))
	case nr != nil && nr.NotPlaced != "":
		// Not "loading": nothing is, and a client told to retry in a few
		// seconds would be told so for as long as it asks. The request
		// still asked for the model, so it loads once it can.
		x.fail(w, newError(http.StatusServiceUnavailable, typeUnavailable, "model_not_ready",
			fmt.Sprintf("model %q cannot be loaded on demand now: %s; it loads once it can, retry later", model, nr.NotPlaced)).withRetryAfter(g.cfg.RetryAfter))
	case errors.Is(err, router.ErrNoReplica):
		msg := fmt.Sprintf("model %q has no ready replica; retry later", model)
		if nr != nil && nr.Down > 0 {
			msg = fmt.Sprintf("model %q has no ready replica (%d not answering); retry later", model, nr.Down)
		}
		x.fail(w, newError(http.StatusServiceUnavailable, typeUnavailable, "model_not_ready", msg).withRetryAfter(g.cfg.RetryAfter))
	default:
		x.fail(w, newError(http.StatusServiceUnavailable, typeUnavailable, "model_not_ready",
			fmt.Sprintf("model %q cannot be routed now: %v", model, err)).withRetryAfter(g.cfg.RetryAfter))
	}
}

// connFailure says in a few words how a connection to a replica failed.
func connFailure(err error) string {
	switch {
	case err == nil:
		return "no answer"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return "cannot connect"
	}
	return "connection closed before an answer"
}

// retryable reports whether a request that failed with err never reached
// an engine that answered: the connection was refused, could not be made,
// or was reset or closed before any byte of an answer. Such a request may
// go to another replica. A timeout waiting for an answer is not retried
// (the engine may be working on it), nor is the client leaving.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return true
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// proxy sends body to the endpoint and relays the answer, once: a failure
// before the answer is reported to the client as 502.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, body []byte) {
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.GenerationTimeout)
	defer cancel()
	if err := g.attempt(ctx, w, r, x, ep, body); err != nil {
		g.upstreamFailed(w, r, x, ep, err)
	}
}

// attempt sends body to the endpoint and relays the answer. It returns an
// error, having written nothing to the client, only when the request may go
// to another replica (retryable); every other outcome it answers itself.
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, body []byte) error {
	if x.ticket == nil { // every spending route admits first (gateway.go, spending)
		g.log.Error("request reached the engine without admission", "endpoint", x.rec.Endpoint)
		x.fail(w, newError(http.StatusInternalServerError, typeServer, "", "the request was not admitted"))
		return nil
	}
	path := r.URL.Path
	if x.shape != nil {
		path = "/v1/chat/completions"
	}
	target := strings.TrimSuffix(ep.URL, "/") + path
	if r.URL.RawQuery != "" && x.shape == nil {
		target += "?" + r.URL.RawQuery
	}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		g.log.Warn("building upstream request", "replica", ep.ReplicaID, "err", err)
		x.fail(w, newError(http.StatusBadGateway, typeUpstream, "upstream_error", "the model's replica cannot be reached"))
		return nil
	}
	// The two values over one array: an upstream request is made for
	// every request.
	vals := [...]string{"application/json", x.rec.RequestID}
	up.Header = http.Header{
		"Content-Type":  vals[0:1:1],
		requestIDHeader: vals[1:2:2],
	}
	if a := r.Header.Get("Accept"); a != "" {
		up.Header.Set("Accept", a)
	}
	x.sent = true
	x.sentAt = time.Now()
	resp, err := g.transport.roundTrip(up, func() { x.rateHeaders(w.Header()) })
	if err != nil {
		if r.Context().Err() == nil && retryable(err) {
			return err
		}
		g.upstreamFailed(w, r, x, ep, err)
		return nil
	}
	defer resp.Body.Close()
	x.rateHeaders(w.Header()) // when the engine answered before the request was written
	if resp.StatusCode == http.StatusBadRequest && x.refit != nil {
		// Refused for its length? Sent once more, fitted shorter.
		refit := x.refit
		x.refit = nil
		data, rerr := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBytes))
		if rerr == nil {
			if fitted := refit(data); fitted != nil {
				g.log.Info("engine refused a thread's length; sending it fitted shorter", "model", x.rec.Model, "replica", ep.ReplicaID)
				return g.attempt(ctx, w, r, x, ep, fitted)
			}
		}
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(data), resp.Body))
	}
	x.answered = resp.StatusCode == http.StatusOK && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")

	// A stream, translated or not, is bounded by StreamIdleTimeout.
	var idle *idleWatch
	if d := g.cfg.StreamIdleTimeout; d > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		idle = &idleWatch{d: d}
		idle.t = time.AfterFunc(d, func() { idle.fired.Store(true); resp.Body.Close() })
		defer idle.t.Stop()
	}
	if ts, ok := x.shape.(translator); ok {
		g.relayShaped(w, r, x, ep, resp, ts, idle)
		return nil
	}
	if x.shape != nil {
		x.shape.setHeaders(w.Header())
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if pt, ok := x.shape.(passthrough); ok && resp.StatusCode == http.StatusOK {
			// Kept when the answer is whole, before its [DONE], so that
			// the stream can say when it was not.
			x.beforeDone = func() []byte { return g.streamAnswered(w, r, x, pt) }
		}
		g.relayStream(w, r, x, resp, idle)
		return nil
	}
	g.relayBody(w, r, x, ep, resp)
	return nil
}

// idleWatch ends a stream (by closing the engine's response, which ends
// the read waiting on it) when no byte came from the engine for d; kick
// restarts the wait, fired says whether it ended the stream.
type idleWatch struct {
	d     time.Duration
	t     *time.Timer
	fired atomic.Bool
}

func (i *idleWatch) kick() {
	if i != nil {
		i.t.Reset(i.d)
	}
}

// upstreamFailed answers a request whose upstream failed before anything
// was sent to the client.
func (g *Gateway) upstreamFailed(w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, err error) {
	if r.Context().Err() != nil {
		x.rec.Status = statusClientGone
		return
	}
	g.log.Warn("upstream request", "replica", ep.ReplicaID, "model", x.rec.Model, "err", err)
	x.fail(w, newError(http.StatusBadGateway, typeUpstream, "upstream_error",
		"the model's replica failed before answering; retry the request"))
}

// relayBody relays a non-streamed response and reads its usage.
func (g *Gateway) relayBody(w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, resp *http.Response) {
	size := 4 << 10
	if resp.ContentLength > 0 && resp.ContentLength <= maxBufferedResponse {
		size = int(resp.ContentLength) + 1
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBufferedResponse+1))
	if err != nil {
		g.upstreamFailed(w, r, x, ep, err)
		return
	}
	data := buf.Bytes()
	x.inHand = time.Now()
	copyResponseHeaders(w.Header(), resp.Header)
	x.rec.Status = resp.StatusCode
	if len(data) <= maxBufferedResponse {
		pt, kept := x.shape.(passthrough)
		kept = kept && resp.StatusCode == http.StatusOK
		if kept {
			// Kept before it is sent, so that the answer can say when it
			// was not (a thread's x-llmgw-thread-unsaved).
			x.usage = bodyUsage(data)
			g.answered(r, x, ep, pt, data)
			pt.setHeaders(w.Header())
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(resp.StatusCode)
		// Sent now, not when the handler returns: the request's
		// settlement and records come after the client has its answer,
		// and so does reading its usage (settling needs it, the client
		// does not).
		if _, err := w.Write(data); err == nil {
			_ = http.NewResponseController(w).Flush()
			x.firstByte()
		}
		if resp.StatusCode == http.StatusOK && !kept {
			x.usage = bodyUsage(data)
		}
		return
	}
	// Too large to hold: relay the rest as it comes, keeping a tail. A
	// thread does not keep such an answer, and says so.
	if s, ok := x.shape.(*threadShape); ok && resp.StatusCode == http.StatusOK {
		s.notStored(g, x.rec.Principal.Project, fmt.Sprintf("the answer is longer than the %d MiB a thread's answer may be", maxBufferedResponse>>20), nil)
		s.setHeaders(w.Header())
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := w.Write(data); err != nil {
		return
	}
	x.firstByte()
	tail := &tailBuffer{max: 8 << 10}
	_, _ = tail.Write(data) // a tailBuffer never fails to write
	if _, err := io.Copy(w, io.TeeReader(resp.Body, tail)); err != nil {
		g.log.Debug("relaying large response", "replica", ep.ReplicaID, "err", err)
		return
	}
	if resp.StatusCode == http.StatusOK {
		x.usage = tailUsage(tail.b)
	}
}

// answered hands a passthrough shape the whole answer the client got.
func (g *Gateway) answered(r *http.Request, x *exchange, ep router.Endpoint, pt passthrough, data []byte) {
	res, err := apishape.ParseChatCompletion(data)
	if err != nil {
		g.log.Warn("reading engine answer", "replica", ep.ReplicaID, "model", x.rec.Model, "err", err)
		if s, ok := pt.(*threadShape); ok {
			s.notStored(g, x.rec.Principal.Project, "the engine's answer could not be read", err)
		}
		return
	}
	pt.completed(r.Context(), g, x, res)
}

// usageJSON is OpenAI's usage object.
type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (u *usageJSON) usage() request.Usage {
	if u == nil {
		return request.Usage{}
	}
	return request.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens, Reported: true}
}

// bodyUsage reads the usage object of a complete response body, as
// decodeUsage does; a valid body is walked by hand (the top level only, the
// usage value decoded), which spares decoding the whole answer.
func bodyUsage(data []byte) request.Usage {
	if u, ok := walkUsage(data); ok {
		return u
	}
	return decodeUsage(data)
}

// walkUsage is bodyUsage for a valid JSON object whose keys encoding/json
// could match to "usage" only by being "usage"; ok is false otherwise.
func walkUsage(data []byte) (request.Usage, bool) {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' || !validJSON(data) {
		return request.Usage{}, false
	}
	var u *usageJSON
	for i = skipSpace(data, i+1); data[i] != '}'; {
		keyEnd := skipString(data, i)
		key := data[i+1 : keyEnd-1]
		start := skipColon(data, keyEnd)
		end := skipValue(data, start)
		switch {
		case string(key) == "usage":
			// Into the same pointer, as the decoder does with a
			// repeated key: the last wins, field by field.
			if json.Unmarshal(data[start:end], &u) != nil {
				return request.Usage{}, true
			}
		case mayFoldToUsage(key):
			return request.Usage{}, false
		}
		if i = skipSpace(data, end); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return u.usage(), true
}

// mayFoldToUsage reports whether encoding/json might match a raw key
// other than "usage" to the field usage: escaped, not ASCII, or "usage"
// in other case.
func mayFoldToUsage(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c >= 0x80 {
			return true
		}
	}
	return len(key) == len("usage") && strings.EqualFold(string(key), "usage")
}

// decodeUsage reads the usage object of a complete response body with
// encoding/json.
func decodeUsage(data []byte) request.Usage {
	var v struct {
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil {
		return request.Usage{}
	}
	return v.Usage.usage()
}

// tailUsage finds the last "usage" object in the tail of a response. A
// quote inside a JSON string is escaped, so `"usage"` cannot be string
// content.
func tailUsage(tail []byte) request.Usage {
	i := bytes.LastIndex(tail, []byte(`"usage"`))
	if i < 0 {
		return request.Usage{}
	}
	rest := tail[skipColon(tail, i+len(`"usage"`)):]
	var u *usageJSON
	if json.NewDecoder(bytes.NewReader(rest)).Decode(&u) != nil {
		return request.Usage{}
	}
	return u.usage()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.b = append(t.b[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}
