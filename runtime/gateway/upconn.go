package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// upstream sends the gateway's requests to engines over HTTP/1.1
// connections it keeps itself. The bytes on the wire are net/http's own
// (Request.Write, http.ReadResponse); what differs from http.Transport is
// what an open connection holds. The Transport gives each connection a
// read loop and a write loop goroutine and a 4 KiB reader and writer for
// as long as it is open: with 1,000 streams that is 2,000 goroutine stacks
// and 8 MB of buffers, a fifth of the control plane's memory
// (BenchmarkSoak1000Streams). Here the goroutine that relays the answer
// reads it itself, the writer is taken from a pool for the write only, and
// an idle connection gives its reader back too: an idle connection holds
// its socket, a timer and the means to look at the socket, nothing else.
//
// Requests to anything but http:// go through the standard transport
// (every engine the reconciler routes to is http://), and so does every
// request where a kept connection cannot be looked at without reading it
// (ownConns, upconn_other.go).
type upstream struct {
	dialer        net.Dialer
	dial          func(ctx context.Context, network, address string) (net.Conn, error)
	headerTimeout time.Duration
	idleTimeout   time.Duration
	maxIdle       int // per host
	maxIdleTotal  int // all hosts together
	other         *http.Transport

	mu    sync.Mutex
	idle  map[string][]*upConn // by host:port, the most recently used last
	nidle int                  // connections in idle
}

// upConn is one connection to an engine.
type upConn struct {
	c    net.Conn
	host string
	br   *bufio.Reader // nil while idle: its buffer is pooled
	// idleTimer closes the connection once it has been idle for the
	// upstream's idleTimeout.
	idleTimer *time.Timer
	idleSince time.Time // when it was last kept
	// readLimit is what br may still read from c: response headers are
	// bounded (maxResponseHeaderBytes), bodies are not.
	readLimit int64
	// written counts the bytes of the request being sent that reached
	// the socket; writeErr is the socket's first error writing it.
	written  int64
	writeErr error
	// peek looks at the idle socket (open, upconn_unix.go); made on the
	// first look, then kept, so that looking allocates nothing.
	peek *peeker
}

const (
	upstreamMaxIdlePerHost = 512
	upstreamMaxIdle        = 4096
	upstreamIdleTimeout    = 90 * time.Second
	upstreamBufSize        = 4 << 10
)

var (
	upReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upstreamBufSize) }}
	upWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, upstreamBufSize) }}
)

// newUpstream returns the client for engines: a 3-second dial, TCP
// keep-alives every 30 s, up to 512 idle connections per engine and 4,096
// in all (the oldest closed first), closed after 90 s idle, headerTimeout
// (when positive) for an engine's response headers.
func newUpstream(headerTimeout time.Duration) *upstream {
	u := &upstream{
		// A replica whose machine is gone answers no dial: 3 s and the
		// request goes to another.
		dialer:        net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		headerTimeout: headerTimeout,
		idleTimeout:   upstreamIdleTimeout,
		maxIdle:       upstreamMaxIdlePerHost,
		maxIdleTotal:  upstreamMaxIdle,
		other:         newTransport(headerTimeout),
		idle:          map[string][]*upConn{},
	}
	u.dial = u.dialer.DialContext
	return u
}

// RoundTrip sends req and returns the engine's response headers; the body
// is read from the connection as the caller reads it, and the caller must
// close it. A request is sent once more, on another connection, only when
// it failed on a connection kept from before and either no byte of it
// reached the socket (the engine had closed the connection while it was
// idle) or it may be sent twice (replayable: GET, HEAD, OPTIONS, TRACE,
// or an Idempotency-Key header), the rule of http.Transport. A POST the
// engine may have read is never sent again here: it would be generated
// twice. The request's context ends the connection when it is done.
func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	return u.roundTrip(req, nil)
}

// roundTrip is RoundTrip calling waiting, when set, once the request is
// written and the engine's answer is awaited: the caller's work that need
// not delay the request (its answer's headers) is done while the engine
// works. Through the standard transport it is called before the request.
func (u *upstream) roundTrip(req *http.Request, waiting func()) (*http.Response, error) {
	if req.URL.Scheme != "http" || !ownConns {
		if waiting != nil {
			waiting()
		}
		return u.other.RoundTrip(req)
	}
	ctx := req.Context()
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for tries := 0; ; tries++ {
		pc, reused, err := u.get(ctx, host)
		if err != nil {
			return nil, err
		}
		resp, out, err := u.send(ctx, pc, req, waiting)
		if err == nil {
			return resp, nil
		}
		if reused && tries == 0 && ctx.Err() == nil && out.mayResend(req, err) {
			if req.Body == nil || req.Body == http.NoBody {
				continue
			}
			if req.GetBody != nil {
				if req.Body, err = req.GetBody(); err == nil {
					continue
				}
			}
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%w: %w", cerr, err)
		}
		return nil, err
	}
}

// sent is how far a failed request got.
type sent struct {
	wrote    bool // some byte of it reached the socket
	answered bool // some byte of an answer came back
}

// mayResend reports whether a request that failed with err on a kept
// connection may be sent again: nothing of it was written, or it is
// replayable and the connection was found closed before any answer.
func (s sent) mayResend(req *http.Request, err error) bool {
	if !s.wrote {
		return true
	}
	return !s.answered && replayable(req) && closedUnanswered(err)
}

// replayable reports whether req may reach an engine twice, by
// http.Transport's rule: an idempotent method, or an idempotency key.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// closedUnanswered reports whether err is a kept connection found closed:
// written to after the engine closed it, or closed without an answer. A
// timeout is not (the engine may be working on the request).
func closedUnanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// get returns an idle connection to host that is still open, or a new one;
// reused says which.
func (u *upstream) get(ctx context.Context, host string) (pc *upConn, reused bool, err error) {
	for {
		u.mu.Lock()
		list := u.idle[host]
		if len(list) == 0 {
			u.mu.Unlock()
			break
		}
		pc = list[len(list)-1]
		list[len(list)-1] = nil
		u.idle[host] = list[:len(list)-1]
		u.nidle--
		u.mu.Unlock()
		pc.idleTimer.Stop()
		if pc.open() {
			return pc, true, nil
		}
		_ = pc.c.Close()
	}
	c, err := u.dial(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	return &upConn{c: c, host: host}, false, nil
}

// send writes req on pc and reads the response headers; out says how far
// a failed request got.
func (u *upstream) send(ctx context.Context, pc *upConn, req *http.Request, waiting func()) (*http.Response, sent, error) {
	stop := context.AfterFunc(ctx, func() { _ = pc.c.Close() })
	fail := func(out sent, err error) (*http.Response, sent, error) {
		stop()
		pc.close()
		return nil, out, err
	}
	bw := upWriters.Get().(*bufio.Writer)
	pc.written, pc.writeErr = 0, nil
	bw.Reset(pc)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	upWriters.Put(bw)
	if err != nil {
		// net/http reports a failed write of the body as a failed read
		// of it, in a type of its own that hides the cause: the
		// connection's own error says what happened (reset, closed).
		if pc.writeErr != nil {
			err = pc.writeErr
		}
		out := sent{wrote: pc.written > 0}
		if !out.wrote {
			return fail(out, err)
		}
		// The engine may have answered before it stopped reading (413
		// for a body too large, then closed): that answer is the
		// request's, as with http.Transport.
		wait := earlyAnswerWait
		if u.headerTimeout > 0 {
			wait = min(wait, u.headerTimeout)
		}
		resp, answered, rerr := u.readResponse(pc, req, wait)
		if rerr != nil {
			return fail(sent{wrote: true, answered: answered}, err)
		}
		resp.Body = &upBody{rc: resp.Body, u: u, pc: pc, stop: stop}
		return resp, sent{}, nil
	}
	if waiting != nil {
		waiting()
	}
	resp, answered, err := u.readResponse(pc, req, u.headerTimeout)
	if err != nil {
		return fail(sent{wrote: true, answered: answered}, err)
	}
	// A connection switched to another protocol is not HTTP any more.
	keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &upBody{rc: resp.Body, u: u, pc: pc, stop: stop, keep: keep}
	return resp, sent{}, nil
}

const (
	// maxResponseHeaderBytes bounds an engine's response headers, interim
	// (1xx) answers included, as http.Transport's default does: an engine
	// that sends headers without end fails its request instead of
	// filling the gateway's memory.
	maxResponseHeaderBytes = 10 << 20
	// max1xxResponses bounds the interim answers before the answer, as
	// http.Transport's does.
	max1xxResponses = 5
	// earlyAnswerWait is how long an answer is looked for after writing
	// the request failed.
	earlyAnswerWait = 100 * time.Millisecond
)

// errHeadersTooLarge is what reading past maxResponseHeaderBytes returns.
var errHeadersTooLarge = fmt.Errorf("the engine's response headers exceed %d bytes", maxResponseHeaderBytes)

// readResponse reads the response headers of req from pc, waiting up to
// timeout (when positive) for them. answered says whether any byte of an
// answer came back.
func (u *upstream) readResponse(pc *upConn, req *http.Request, timeout time.Duration) (*http.Response, bool, error) {
	if pc.br == nil {
		pc.br = upReaders.Get().(*bufio.Reader)
		pc.br.Reset(pc)
	}
	if timeout > 0 {
		_ = pc.c.SetReadDeadline(time.Now().Add(timeout))
	}
	pc.readLimit = maxResponseHeaderBytes
	if _, err := pc.br.Peek(1); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = fmt.Errorf("timeout awaiting response headers (%s): %w", timeout, err)
		}
		return nil, false, err
	}
	var resp *http.Response
	for interim := 0; ; interim++ {
		var err error
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			if pc.readLimit <= 0 {
				err = errHeadersTooLarge
			}
			return nil, true, err
		}
		if resp.StatusCode == http.StatusSwitchingProtocols && req.Header.Get("Upgrade") == "" {
			return nil, true, errors.New("the engine switched protocols (101) though the request asked for no upgrade")
		}
		// An interim answer (100 Continue, 103 Early Hints) is followed
		// by the answer.
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if interim+1 >= max1xxResponses {
			return nil, true, fmt.Errorf("the engine sent more than %d interim (1xx) answers", max1xxResponses)
		}
	}
	pc.readLimit = math.MaxInt64
	if timeout > 0 {
		_ = pc.c.SetReadDeadline(time.Time{})
	}
	return resp, true, nil
}

// Read reads from the connection, at most readLimit bytes.
func (pc *upConn) Read(p []byte) (int, error) {
	if pc.readLimit <= 0 {
		return 0, errHeadersTooLarge
	}
	if int64(len(p)) > pc.readLimit {
		p = p[:pc.readLimit]
	}
	n, err := pc.c.Read(p)
	pc.readLimit -= int64(n)
	return n, err
}

// Write writes to the connection, counting the bytes written and keeping
// the first error.
func (pc *upConn) Write(p []byte) (int, error) {
	n, err := pc.c.Write(p)
	pc.written += int64(n)
	if err != nil && pc.writeErr == nil {
		pc.writeErr = err
	}
	return n, err
}

// ReadFrom copies a request body to the connection as the connection's
// own ReadFrom would (bufio.Writer hands large bodies to it), counting
// the bytes and keeping the connection's error apart from the body's.
func (pc *upConn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := pc.c.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{pc}, r)
	}
	src := &bodySource{r: r}
	n, err := rf.ReadFrom(src)
	pc.written += n
	if err != nil && src.err == nil && pc.writeErr == nil {
		pc.writeErr = err
	}
	return n, err
}

// bodySource keeps the error of reading a request body.
type bodySource struct {
	r   io.Reader
	err error
}

func (s *bodySource) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// put keeps pc for another request, or closes it when it cannot be kept.
func (u *upstream) put(pc *upConn) {
	if pc.br != nil {
		if pc.br.Buffered() > 0 { // bytes nobody asked for: not to be trusted
			pc.close()
			return
		}
		pc.br.Reset(nil)
		upReaders.Put(pc.br)
		pc.br = nil
	}
	u.mu.Lock()
	if len(u.idle[pc.host]) >= u.maxIdle {
		u.mu.Unlock()
		pc.close()
		return
	}
	var drop []*upConn
	// The oldest idle connection to this engine is the likeliest to have
	// been closed by the engine's own keep-alive timeout: one that was is
	// closed now rather than kept until it expires.
	if list := u.idle[pc.host]; len(list) > 0 && !list[0].open() {
		drop = append(drop, u.take(pc.host, 0))
	}
	if u.nidle >= u.maxIdleTotal { // the oldest of all goes
		drop = append(drop, u.take(u.oldestHost(), 0))
	}
	u.idle[pc.host] = append(u.idle[pc.host], pc)
	u.nidle++
	pc.idleSince = time.Now()
	if pc.idleTimer == nil {
		pc.idleTimer = time.AfterFunc(u.idleTimeout, func() { u.expire(pc) })
	} else {
		pc.idleTimer.Reset(u.idleTimeout)
	}
	u.mu.Unlock()
	for _, old := range drop {
		old.idleTimer.Stop()
		old.close()
	}
}

// take removes the i-th idle connection to host and returns it; u.mu is
// held.
func (u *upstream) take(host string, i int) *upConn {
	list := u.idle[host]
	pc := list[i]
	copy(list[i:], list[i+1:])
	list[len(list)-1] = nil
	list = list[:len(list)-1]
	if len(list) == 0 {
		delete(u.idle, host)
	} else {
		u.idle[host] = list
	}
	u.nidle--
	return pc
}

// oldestHost is the host whose oldest idle connection was kept longest
// ago; u.mu is held and some connection is idle.
func (u *upstream) oldestHost() string {
	var host string
	var since time.Time
	for h, list := range u.idle {
		if host == "" || list[0].idleSince.Before(since) {
			host, since = h, list[0].idleSince
		}
	}
	return host
}

// expire closes pc if it is still idle.
func (u *upstream) expire(pc *upConn) {
	u.mu.Lock()
	i := slices.Index(u.idle[pc.host], pc)
	if i < 0 { // taken for a request meanwhile
		u.mu.Unlock()
		return
	}
	u.take(pc.host, i)
	u.mu.Unlock()
	pc.close()
}

// idleConns is the number of idle connections kept.
func (u *upstream) idleConns() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, list := range u.idle {
		n += len(list)
	}
	return n
}

// CloseIdleConnections closes the idle connections; connections in use
// are kept when their request ends, as http.Transport does.
func (u *upstream) CloseIdleConnections() {
	u.mu.Lock()
	idle := u.idle
	u.idle = map[string][]*upConn{}
	u.nidle = 0
	u.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.idleTimer.Stop()
			pc.close()
		}
	}
	u.other.CloseIdleConnections()
}

func (pc *upConn) close() {
	_ = pc.c.Close()
	if pc.br != nil {
		pc.br.Reset(nil)
		upReaders.Put(pc.br)
		pc.br = nil
	}
}

// upBody is an engine's response body. Read to its end, its connection is
// kept for another request; closed before, the connection is closed
// (which also ends a read waiting on it in another goroutine).
type upBody struct {
	rc   io.ReadCloser
	u    *upstream
	pc   *upConn
	stop func() bool
	keep bool

	once sync.Once
	// err is what a read returns once the body has ended: io.EOF after
	// its end, errBodyClosed after Close.
	err atomic.Pointer[error]
}

// errBodyClosed is what a read of a closed body returns.
var errBodyClosed = errors.New("read on a closed response body")

func (b *upBody) Read(p []byte) (int, error) {
	if err := b.err.Load(); err != nil {
		return 0, *err
	}
	n, err := b.rc.Read(p)
	if errors.Is(err, io.EOF) {
		b.finish(io.EOF, b.keep)
	}
	return n, err
}

// Close ends the body. It may be called while a read waits in another
// goroutine (a stream's idle watch): the connection is closed, which ends
// that read, and its reader is left to it rather than pooled.
func (b *upBody) Close() error {
	b.finish(errBodyClosed, false)
	return nil
}

// finish ends the body once: the connection is kept when keep is set and
// the request's context did not end it, else closed.
func (b *upBody) finish(err error, keep bool) {
	b.once.Do(func() {
		b.err.Store(&err)
		if b.stop() && keep {
			b.u.put(b.pc)
			return
		}
		_ = b.pc.c.Close()
	})
}
