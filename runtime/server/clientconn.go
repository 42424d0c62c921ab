package server

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/gateway"
	"github.com/llmgw/llmgw/runtime/metrics"
)

// refusedLogEvery is the least time between two log lines about refused
// client connections: a flood is reported, not echoed line by line.
const refusedLogEvery = 10 * time.Second

// clientListener is the client API's listener. It counts the connections
// on which no request has authenticated yet and closes, as soon as it
// accepts it, a connection beyond max of them. A connection stops counting
// when a request on it authenticates (the gateway calls the function
// connContext puts in the connection's context) or when it closes.
//
// What such a connection can hold is bounded by the client timeouts:
// timeouts.client_header for its headers, timeouts.client_body for a body
// (an unauthenticated request's body is never read) and
// timeouts.client_idle between requests.
type clientListener struct {
	net.Listener
	max int64
	log *slog.Logger

	unauthenticated atomic.Int64

	mu          sync.Mutex
	refused     int64 // since the last log line
	lastLogged  time.Time
	refusedEver atomic.Int64
}

// newClientListener bounds l at limit unauthenticated connections; a limit
// that is not positive (a configuration that did not pass Validate) takes
// the default rather than refusing every connection.
func newClientListener(l net.Listener, limit int, log *slog.Logger) *clientListener {
	if limit <= 0 {
		limit = config.Default().Limits.MaxUnauthenticatedConns
	}
	return &clientListener{Listener: l, max: int64(limit), log: log}
}

// Accept returns the next connection within the bound, closing those
// beyond it.
func (l *clientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.unauthenticated.Add(1) > l.max {
			l.unauthenticated.Add(-1)
			// Counted before the close, so whoever sees the close sees it
			// counted.
			l.noteRefused()
			_ = c.Close()
			continue
		}
		return &clientConn{Conn: c, l: l}, nil
	}
}

// noteRefused counts a refused connection and logs the count at most once
// per refusedLogEvery.
func (l *clientListener) noteRefused() {
	l.refusedEver.Add(1)
	l.mu.Lock()
	l.refused++
	now := time.Now()
	if now.Sub(l.lastLogged) < refusedLogEvery {
		l.mu.Unlock()
		return
	}
	n := l.refused
	l.refused, l.lastLogged = 0, now
	l.mu.Unlock()
	l.log.Warn("client connections closed unanswered: too many have not authenticated",
		"refused", n, "limit", l.max, "key", "limits.max_unauthenticated_conns")
}

// collectors export the count of unauthenticated connections and of
// connections refused.
func (l *clientListener) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Name: "client_unauthenticated_connections",
			Help: "Client connections open on which no request has authenticated yet.",
		}, func() float64 { return float64(l.unauthenticated.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "client_connections_refused_total",
			Help: "Client connections closed unanswered because limits.max_unauthenticated_conns connections had not authenticated.",
		}, func() float64 { return float64(l.refusedEver.Load()) }),
	}
}

// connContext is the client server's ConnContext: it gives the gateway the
// means to mark the connection authenticated.
func (l *clientListener) connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*clientConn); ok {
		return gateway.WithConnAuthenticated(ctx, cc.release)
	}
	return ctx
}

// clientConn is a connection counted by its clientListener until it
// authenticates or closes.
type clientConn struct {
	net.Conn
	l        *clientListener
	released atomic.Bool
}

// release stops counting the connection; only the first call counts.
func (c *clientConn) release() {
	if c.released.CompareAndSwap(false, true) {
		c.l.unauthenticated.Add(-1)
	}
}

func (c *clientConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// CloseWrite keeps net/http's half-close before closing a connection whose
// request body was left unread (so the answer is not lost to a reset).
func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
