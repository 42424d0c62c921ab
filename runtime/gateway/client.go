package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// client is the gateway's HTTP/1.1 client for engines. Each exchange runs on
// the calling goroutine over a pooled keep-alive connection: no reader and
// writer goroutines per connection and no timer per request, which is most
// of what net/http's Transport costs on a proxy hop. A connection goes back
// to its pool only when the response body was read to its end, the engine
// allows keep-alive and the request was not canceled; anything else closes
// it, so a connection is never reused mid-exchange.
type client struct {
	dialer        net.Dialer
	headerTimeout time.Duration // bounds the wait for response headers
	idleTimeout   time.Duration // an idle connection older than this is closed
	maxIdle       int           // idle connections kept per engine

	mu     sync.Mutex
	hosts  map[string]*hostPool // by the engine's base URL
	prune  *time.Timer          // armed while a connection is idle
	closed bool
}

// Client defaults.
const (
	upstreamDialTimeout = 5 * time.Second
	upstreamIdleTimeout = 90 * time.Second
	upstreamMaxIdle     = 512
	upstreamReadBuffer  = 16 << 10
)

func newClient(headerTimeout time.Duration) *client {
	return &client{
		dialer:        net.Dialer{Timeout: upstreamDialTimeout, KeepAlive: 30 * time.Second},
		headerTimeout: headerTimeout,
		idleTimeout:   upstreamIdleTimeout,
		maxIdle:       upstreamMaxIdle,
		hosts:         make(map[string]*hostPool),
	}
}

// hostPool holds the idle connections to one engine, most recently used
// last.
type hostPool struct {
	addr   string // host:port to dial
	host   string // the Host header
	prefix string // the base URL's path, without a trailing slash
	err    error  // the base URL cannot be used
	idle   []*upConn
}

func newHostPool(base string) *hostPool {
	u, err := url.Parse(base)
	if err != nil {
		return &hostPool{err: fmt.Errorf("parsing engine URL %q: %w", base, err)}
	}
	if u.Scheme != "http" || u.Host == "" {
		return &hostPool{err: fmt.Errorf("engine URL %q: want http://host:port", base)}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	prefix := u.EscapedPath()
	for len(prefix) > 0 && prefix[len(prefix)-1] == '/' {
		prefix = prefix[:len(prefix)-1]
	}
	return &hostPool{addr: addr, host: u.Host, prefix: prefix}
}

// upConn is one connection to an engine.
type upConn struct {
	nc        net.Conn
	br        *bufio.Reader
	wbuf      []byte // the request head, reused
	raw       syscall.RawConn
	peek      func(fd uintptr) bool // bound once: checks the socket without blocking
	peekBuf   [1]byte
	alive     bool
	reused    bool
	idleSince time.Time
}

// upRequest is what the gateway sends to an engine: always a POST of a JSON
// body.
type upRequest struct {
	base      string // the engine's base URL
	path      string // escaped path
	rawQuery  string
	requestID string
	accept    string // relayed when it is a sane header value
	body      []byte
	deadline  time.Time // the whole exchange ends by then
}

// errClientClosed is returned for a connection put back after Close.
var errClientClosed = errors.New("upstream client closed")

// do sends req and returns the engine's response. Canceling ctx closes the
// connection, ending any read or write in progress. The caller must close
// the response body. A reused connection that turns out closed by the
// engine before any byte of the response arrived (its idle timeout raced
// the request) is replaced once by a fresh one.
func (c *client) do(ctx context.Context, req *upRequest) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		hp, uc, err := c.conn(ctx, req.base)
		if err != nil {
			return nil, err
		}
		resp, sent, err := c.exchange(ctx, hp, uc, req)
		if err == nil {
			return resp, nil
		}
		_ = uc.nc.Close()
		if attempt == 0 && uc.reused && !sent && ctx.Err() == nil && connGone(err) {
			continue
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("sending request to %s: %w", hp.addr, ctxErr)
		}
		return nil, err
	}
}

// connGone reports whether err says the peer closed the connection.
func connGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// exchange writes the request on uc and reads the response head. sent
// reports whether any byte of a response arrived.
func (c *client) exchange(ctx context.Context, hp *hostPool, uc *upConn, req *upRequest) (resp *http.Response, sent bool, err error) {
	nc := uc.nc
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer func() {
		if err != nil {
			stop()
		}
	}()
	headerDeadline := time.Now().Add(c.headerTimeout)
	if req.deadline.Before(headerDeadline) {
		headerDeadline = req.deadline
	}
	if err := nc.SetDeadline(headerDeadline); err != nil {
		return nil, false, fmt.Errorf("setting deadline on %s: %w", hp.addr, err)
	}
	uc.wbuf = appendRequestHead(uc.wbuf[:0], hp, req)
	if len(req.body) <= 64<<10 {
		uc.wbuf = append(uc.wbuf, req.body...)
		_, err = nc.Write(uc.wbuf)
	} else {
		bufs := net.Buffers{uc.wbuf, req.body}
		_, err = bufs.WriteTo(nc)
	}
	if len(uc.wbuf) > 64<<10 {
		uc.wbuf = nil // do not pin a large body
	}
	if err != nil {
		return nil, false, fmt.Errorf("writing request to %s: %w", hp.addr, err)
	}
	for {
		if _, err := uc.br.Peek(1); err != nil {
			return nil, false, fmt.Errorf("awaiting response headers from %s: %w", hp.addr, err)
		}
		resp, err = http.ReadResponse(uc.br, nil)
		if err != nil {
			return nil, true, fmt.Errorf("reading response headers from %s: %w", hp.addr, err)
		}
		// Skip informational answers; 101 would switch protocols, which a
		// POST to an engine never asks for.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil, true, fmt.Errorf("reading response from %s: unexpected 101 Switching Protocols", hp.addr)
	}
	if err := nc.SetReadDeadline(req.deadline); err != nil {
		return nil, true, fmt.Errorf("setting deadline on %s: %w", hp.addr, err)
	}
	b := &upBody{src: resp.Body, c: c, hp: hp, base: req.base, uc: uc, stop: stop, keep: !resp.Close}
	if resp.Body == http.NoBody {
		b.eof = true
	}
	resp.Body = b
	return resp, true, nil
}

// appendRequestHead appends the request line and headers.
func appendRequestHead(b []byte, hp *hostPool, req *upRequest) []byte {
	b = append(b, "POST "...)
	b = append(b, hp.prefix...)
	b = append(b, req.path...)
	if req.rawQuery != "" {
		b = append(b, '?')
		b = append(b, req.rawQuery...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, hp.host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(req.body)), 10)
	if req.requestID != "" {
		b = append(b, "\r\n"+requestIDHeader+": "...)
		b = append(b, req.requestID...)
	}
	if req.accept != "" && validHeaderValue(req.accept) {
		b = append(b, "\r\nAccept: "...)
		b = append(b, req.accept...)
	}
	return append(b, "\r\n\r\n"...)
}

// validHeaderValue reports whether v can be written as a header value: no
// control characters but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// conn returns an idle connection to base that is still open, or dials one.
func (c *client) conn(ctx context.Context, base string) (*hostPool, *upConn, error) {
	now := time.Now()
	c.mu.Lock()
	hp := c.hosts[base]
	if hp == nil {
		hp = newHostPool(base)
		if hp.err == nil && !c.closed {
			c.hosts[base] = hp
		}
	}
	if hp.err != nil {
		c.mu.Unlock()
		return nil, nil, hp.err
	}
	for len(hp.idle) > 0 {
		uc := hp.idle[len(hp.idle)-1]
		hp.idle[len(hp.idle)-1] = nil
		hp.idle = hp.idle[:len(hp.idle)-1]
		if now.Sub(uc.idleSince) < c.idleTimeout {
			c.mu.Unlock()
			if uc.open() {
				uc.reused = true
				return hp, uc, nil
			}
			_ = uc.nc.Close()
			c.mu.Lock()
			continue
		}
		_ = uc.nc.Close()
	}
	c.mu.Unlock()
	nc, err := c.dialer.DialContext(ctx, "tcp", hp.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", hp.addr, err)
	}
	uc := &upConn{nc: nc, br: bufio.NewReaderSize(nc, upstreamReadBuffer), wbuf: make([]byte, 0, 1024)}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			uc.raw = raw
			uc.peek = uc.peekSocket
		}
	}
	return hp, uc, nil
}

// open reports whether an idle connection is still usable: the engine has
// neither closed it nor sent anything unasked.
func (uc *upConn) open() bool {
	if uc.br.Buffered() > 0 {
		return false
	}
	if uc.raw == nil {
		return true
	}
	uc.alive = false
	if err := uc.raw.Read(uc.peek); err != nil {
		return false
	}
	return uc.alive
}

// put returns a connection whose exchange finished cleanly to its pool.
func (c *client) put(hp *hostPool, base string, uc *upConn) error {
	if err := uc.nc.SetDeadline(time.Time{}); err != nil {
		_ = uc.nc.Close()
		return fmt.Errorf("clearing deadline: %w", err)
	}
	c.mu.Lock()
	if cur := c.hosts[base]; cur != nil {
		hp = cur
	} else if !c.closed {
		c.hosts[base] = hp // pruned while the connection was in use
	}
	if c.closed || len(hp.idle) >= c.maxIdle {
		c.mu.Unlock()
		_ = uc.nc.Close()
		if c.closed {
			return errClientClosed
		}
		return nil
	}
	uc.idleSince = time.Now()
	hp.idle = append(hp.idle, uc)
	if c.prune == nil {
		c.prune = time.AfterFunc(c.idleTimeout, c.pruneIdle)
	}
	c.mu.Unlock()
	return nil
}

// pruneIdle closes connections idle for longer than the idle timeout and
// forgets engines without idle connections; it runs while any connection
// is idle.
func (c *client) pruneIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	now := time.Now()
	for base, hp := range c.hosts {
		n := 0
		for n < len(hp.idle) && now.Sub(hp.idle[n].idleSince) >= c.idleTimeout {
			_ = hp.idle[n].nc.Close()
			n++
		}
		hp.idle = append(hp.idle[:0], hp.idle[n:]...)
		if len(hp.idle) == 0 {
			delete(c.hosts, base)
		}
	}
	if len(c.hosts) == 0 {
		c.prune = nil
		return
	}
	c.prune.Reset(c.idleTimeout)
}

// Close closes the idle connections; connections in use are closed when
// their exchange ends. The client still works, without keep-alive.
func (c *client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.prune != nil {
		c.prune.Stop()
		c.prune = nil
	}
	for base, hp := range c.hosts {
		for _, uc := range hp.idle {
			_ = uc.nc.Close()
		}
		delete(c.hosts, base)
	}
}

// idleCount returns the number of idle connections to base.
func (c *client) idleCount(base string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hp := c.hosts[base]; hp != nil {
		return len(hp.idle)
	}
	return 0
}

// upBody is a response body that hands its connection back when it was
// read to its end, and closes it otherwise.
type upBody struct {
	src    io.ReadCloser
	c      *client
	hp     *hostPool
	base   string
	uc     *upConn
	stop   func() bool // unregisters the close on cancel
	keep   bool        // the engine allows keep-alive
	eof    bool
	closed bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.src.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

// Close ends the exchange. It never reads what is left of the body.
func (b *upBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// stop reports false when the request was canceled: the connection is
	// being closed.
	if b.stop() && b.eof && b.keep {
		if err := b.c.put(b.hp, b.base, b.uc); err != nil && !errors.Is(err, errClientClosed) {
			return err
		}
		return nil
	}
	return b.uc.nc.Close()
}
