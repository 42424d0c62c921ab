package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// refusalLog wraps a listener's transport credentials so that every TLS
// handshake it refuses — an expired certificate, one from another CA, none
// at all, plain text on a TLS port — is logged on the control plane with
// the peer's address and the reason, where an operator looks. gRPC itself
// only reports them through its own logger, which llmgw silences.
//
// At most burst refusals per peer IP are logged per minute; the next one
// logged says how many were left out, so a peer retrying in a loop cannot
// flood the log.
type refusalLog struct {
	credentials.TransportCredentials
	log      *slog.Logger
	listener string
	burst    int
	now      func() time.Time

	mu    sync.Mutex
	peers map[string]*refusals
}

type refusals struct {
	since   time.Time
	logged  int
	skipped int
}

func newRefusalLog(creds credentials.TransportCredentials, log *slog.Logger, listener string) *refusalLog {
	return &refusalLog{TransportCredentials: creds, log: log, listener: listener, burst: 5, now: time.Now, peers: map[string]*refusals{}}
}

func (r *refusalLog) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := r.TransportCredentials.ServerHandshake(conn)
	if err != nil && !errors.Is(err, context.Canceled) {
		r.refused(conn.RemoteAddr(), err)
	}
	return c, info, err
}

// Clone keeps the logging on a copy of the credentials.
func (r *refusalLog) Clone() credentials.TransportCredentials {
	return newRefusalLog(r.TransportCredentials.Clone(), r.log, r.listener)
}

func (r *refusalLog) refused(addr net.Addr, err error) {
	ip := addr.String()
	if host, _, splitErr := net.SplitHostPort(ip); splitErr == nil {
		ip = host
	}
	now := r.now()
	r.mu.Lock()
	p := r.peers[ip]
	if p == nil || now.Sub(p.since) >= time.Minute {
		if len(r.peers) > 10000 {
			r.peers = map[string]*refusals{} // a bound, not a policy
		}
		skipped := 0
		if p != nil {
			skipped = p.skipped
		}
		p = &refusals{since: now, skipped: skipped}
		r.peers[ip] = p
	}
	if p.logged >= r.burst {
		p.skipped++
		r.mu.Unlock()
		return
	}
	p.logged++
	skipped := p.skipped
	p.skipped = 0
	r.mu.Unlock()
	args := []any{"listener", r.listener, "remote", addr.String(), "reason", err.Error()}
	if skipped > 0 {
		args = append(args, "not_logged_before", skipped)
	}
	r.log.Warn("tls handshake refused", args...)
}
