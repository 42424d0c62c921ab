package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
// its socket and a timer, nothing else.
//
// Requests to anything but http:// go through the standard transport
// (every engine the reconciler routes to is http://).
type upstream struct {
	dialer        net.Dialer
	headerTimeout time.Duration
	idleTimeout   time.Duration
	maxIdle       int // per host
	other         *http.Transport

	mu   sync.Mutex
	idle map[string][]*upConn // by host:port, the most recently used last
}

// upConn is one connection to an engine.
type upConn struct {
	c    net.Conn
	host string
	br   *bufio.Reader // nil while idle: its buffer is pooled
	// idleTimer closes the connection once it has been idle for the
	// upstream's idleTimeout.
	idleTimer *time.Timer
}

const (
	upstreamMaxIdlePerHost = 512
	upstreamIdleTimeout    = 90 * time.Second
	upstreamBufSize        = 4 << 10
)

var (
	upReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upstreamBufSize) }}
	upWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, upstreamBufSize) }}
)

// newUpstream returns the client for engines: a 3-second dial, TCP
// keep-alives every 30 s, up to 512 idle connections per engine closed
// after 90 s idle, headerTimeout (when positive) for an engine's response
// headers.
func newUpstream(headerTimeout time.Duration) *upstream {
	return &upstream{
		// A replica whose machine is gone answers no dial: 3 s and the
		// request goes to another.
		dialer:        net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		headerTimeout: headerTimeout,
		idleTimeout:   upstreamIdleTimeout,
		maxIdle:       upstreamMaxIdlePerHost,
		other:         newTransport(headerTimeout),
		idle:          map[string][]*upConn{},
	}
}

// RoundTrip sends req and returns the engine's response headers; the body
// is read from the connection as the caller reads it, and the caller must
// close it. A request that failed on a connection kept from before,
// before any byte of an answer came back (the engine closed it while it
// was idle), is sent once more on a new connection, as http.Transport
// does. The request's context ends the connection when it is done.
func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
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
		resp, answered, err := u.send(ctx, pc, req)
		if err == nil {
			return resp, nil
		}
		if reused && !answered && tries == 0 && ctx.Err() == nil && req.GetBody != nil && closedUnanswered(err) {
			if req.Body, err = req.GetBody(); err == nil {
				continue
			}
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%w: %w", cerr, err)
		}
		return nil, err
	}
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
		u.mu.Unlock()
		pc.idleTimer.Stop()
		if open(pc.c) {
			return pc, true, nil
		}
		_ = pc.c.Close()
	}
	c, err := u.dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	return &upConn{c: c, host: host}, false, nil
}

// send writes req on pc and reads the response headers. answered says
// whether any byte of an answer came back.
func (u *upstream) send(ctx context.Context, pc *upConn, req *http.Request) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { _ = pc.c.Close() })
	fail := func(answered bool, err error) (*http.Response, bool, error) {
		stop()
		pc.close()
		return nil, answered, err
	}
	bw := upWriters.Get().(*bufio.Writer)
	bw.Reset(pc.c)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	upWriters.Put(bw)
	if err != nil {
		return fail(false, err)
	}
	if pc.br == nil {
		pc.br = upReaders.Get().(*bufio.Reader)
		pc.br.Reset(pc.c)
	}
	if u.headerTimeout > 0 {
		_ = pc.c.SetReadDeadline(time.Now().Add(u.headerTimeout))
	}
	if _, err := pc.br.Peek(1); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = fmt.Errorf("timeout awaiting response headers (%s): %w", u.headerTimeout, err)
		}
		return fail(false, err)
	}
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			return fail(true, err)
		}
		// An interim answer (100 Continue, 103 Early Hints) is followed
		// by the answer.
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if u.headerTimeout > 0 {
		_ = pc.c.SetReadDeadline(time.Time{})
	}
	resp.Body = &upBody{rc: resp.Body, u: u, pc: pc, stop: stop, keep: !resp.Close && !req.Close}
	return resp, true, nil
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
	u.idle[pc.host] = append(u.idle[pc.host], pc)
	if pc.idleTimer == nil {
		pc.idleTimer = time.AfterFunc(u.idleTimeout, func() { u.expire(pc) })
	} else {
		pc.idleTimer.Reset(u.idleTimeout)
	}
	u.mu.Unlock()
}

// expire closes pc if it is still idle.
func (u *upstream) expire(pc *upConn) {
	u.mu.Lock()
	list := u.idle[pc.host]
	i := -1
	for j, c := range list {
		if c == pc {
			i = j
			break
		}
	}
	if i < 0 { // taken for a request meanwhile
		u.mu.Unlock()
		return
	}
	u.idle[pc.host] = append(list[:i], list[i+1:]...)
	if len(u.idle[pc.host]) == 0 {
		delete(u.idle, pc.host)
	}
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
