package simengine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The rendezvous protocol, one line each way over TCP to DistInitAddr:
//
//	worker -> rank 0:  JOIN <rank> <world-size>\n
//	rank 0 -> worker:  OK\n   or   ERR <reason>\n (and rank 0 closes)
//
// After OK both sides keep the connection open and silent; either side
// closing it means the replica is broken.

const (
	handshakeTimeout = 10 * time.Second
	maxHandshakeLine = 256
	dialBackoffStart = 50 * time.Millisecond
	dialBackoffMax   = time.Second
)

// errRejected marks a join that rank 0 refused; retrying will not help.
var errRejected = errors.New("join rejected")

// group is rank 0's view of its workers.
type group struct {
	ln    net.Listener
	world int
	log   *slog.Logger

	mu       sync.Mutex
	members  map[int]net.Conn
	complete bool
	closing  bool

	ready chan struct{} // closed when every worker has joined
	lost  chan error    // receives the first worker lost after the group formed
}

// rendezvous binds DistInitAddr and returns once all WorldSize-1 workers have
// joined. The listener stays open (refusing late joins) until close.
func rendezvous(ctx context.Context, cfg Config, logger *slog.Logger) (*group, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.DistInitAddr)
	if err != nil {
		return nil, fmt.Errorf("binding dist-init address %s: %w", cfg.DistInitAddr, err)
	}
	g := &group{
		ln:      ln,
		world:   cfg.WorldSize,
		log:     logger,
		members: map[int]net.Conn{},
		ready:   make(chan struct{}),
		lost:    make(chan error, 1),
	}
	logger.Info("waiting for workers", "addr", ln.Addr().String(), "workers", cfg.WorldSize-1)
	go g.accept()
	select {
	case <-g.ready:
		logger.Info("all workers joined", "world_size", cfg.WorldSize)
		return g, nil
	case <-ctx.Done():
		g.close()
		return nil, fmt.Errorf("waiting for workers on %s: %w", ln.Addr(), ctx.Err())
	}
}

func (g *group) accept() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return // listener closed
		}
		go g.handshake(c)
	}
}

func (g *group) handshake(c net.Conn) {
	remote := c.RemoteAddr().String()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReaderSize(c, maxHandshakeLine)
	line, err := br.ReadSlice('\n')
	if err != nil {
		g.log.Warn("worker handshake unreadable", "remote", remote, "err", err)
		c.Close()
		return
	}
	rank, err := g.admit(strings.TrimSpace(string(line)), c)
	if err != nil {
		g.log.Warn("worker refused", "remote", remote, "err", err)
		_, _ = fmt.Fprintf(c, "ERR %s\n", err)
		c.Close()
		return
	}
	if _, err := io.WriteString(c, "OK\n"); err != nil {
		g.drop(rank, c, fmt.Errorf("acknowledging join: %w", err))
		return
	}
	_ = c.SetDeadline(time.Time{})
	// Workers send nothing after joining; a read returning is the
	// connection going away.
	_, err = io.Copy(io.Discard, br)
	if err == nil {
		err = io.EOF
	}
	g.drop(rank, c, err)
}

// admit validates a JOIN line and records the worker.
func (g *group) admit(line string, c net.Conn) (int, error) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "JOIN" {
		return 0, fmt.Errorf("malformed handshake %q, want JOIN <rank> <world-size>", line)
	}
	rank, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, fmt.Errorf("rank %q is not a number", f[1])
	}
	world, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, fmt.Errorf("world size %q is not a number", f[2])
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case world != g.world:
		return 0, fmt.Errorf("world size %d does not match rank 0's %d", world, g.world)
	case rank < 1 || rank >= g.world:
		return 0, fmt.Errorf("rank %d is out of range 1-%d", rank, g.world-1)
	case g.members[rank] != nil:
		return 0, fmt.Errorf("rank %d has already joined", rank)
	case g.complete || g.closing:
		return 0, fmt.Errorf("group is already complete")
	}
	g.members[rank] = c
	g.log.Info("worker joined", "rank", rank, "remote", c.RemoteAddr().String(),
		"joined", len(g.members), "workers", g.world-1)
	if len(g.members) == g.world-1 {
		g.complete = true
		close(g.ready)
	}
	return rank, nil
}

// drop handles a worker's connection ending. Before the group is complete
// the slot is freed so the worker can rejoin; after, the replica is broken.
func (g *group) drop(rank int, c net.Conn, cause error) {
	c.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing || g.members[rank] != c {
		return
	}
	if !g.complete {
		delete(g.members, rank)
		g.log.Warn("worker left before all joined", "rank", rank, "err", cause)
		return
	}
	select {
	case g.lost <- fmt.Errorf("worker rank %d went away: %w", rank, cause):
	default:
	}
}

// close stops accepting and disconnects every worker, which makes them exit.
func (g *group) close() {
	g.mu.Lock()
	g.closing = true
	conns := make([]net.Conn, 0, len(g.members))
	for _, c := range g.members {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	g.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// runWorker joins rank 0 and then stays connected, serving nothing, until
// ctx ends (nil) or rank 0 goes away (an error).
func runWorker(ctx context.Context, cfg Config, logger *slog.Logger) error {
	logger.Info("joining rank 0", "addr", cfg.DistInitAddr, "rank", cfg.Rank, "world_size", cfg.WorldSize)
	c, br, err := joinRank0(ctx, cfg, logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	logger.Info("joined rank 0", "addr", cfg.DistInitAddr, "rank", cfg.Rank)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	_, err = io.Copy(io.Discard, br)
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = io.EOF
	}
	return fmt.Errorf("rank 0 at %s went away: %w", cfg.DistInitAddr, err)
}

// joinRank0 dials DistInitAddr until rank 0 accepts the join, backing off
// between attempts; a refusal from rank 0 is final.
func joinRank0(ctx context.Context, cfg Config, logger *slog.Logger) (net.Conn, *bufio.Reader, error) {
	backoff := dialBackoffStart
	var d net.Dialer
	for attempt := 1; ; attempt++ {
		c, err := d.DialContext(ctx, "tcp", cfg.DistInitAddr)
		if err == nil {
			var br *bufio.Reader
			br, err = handshakeWorker(c, cfg)
			if err == nil {
				return c, br, nil
			}
			c.Close()
			if errors.Is(err, errRejected) {
				return nil, nil, err
			}
		}
		logger.Debug("rank 0 not reachable yet", "addr", cfg.DistInitAddr, "attempt", attempt, "err", err)
		if err := sleepCtx(ctx, backoff); err != nil {
			return nil, nil, fmt.Errorf("joining rank 0 at %s: %w", cfg.DistInitAddr, err)
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}

func handshakeWorker(c net.Conn, cfg Config) (*bufio.Reader, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := fmt.Fprintf(c, "JOIN %d %d\n", cfg.Rank, cfg.WorldSize); err != nil {
		return nil, fmt.Errorf("sending join to %s: %w", cfg.DistInitAddr, err)
	}
	br := bufio.NewReaderSize(c, maxHandshakeLine)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("reading join reply from %s: %w", cfg.DistInitAddr, err)
	}
	reply := strings.TrimSpace(string(line))
	switch {
	case reply == "OK":
		_ = c.SetDeadline(time.Time{})
		return br, nil
	case strings.HasPrefix(reply, "ERR "):
		return nil, fmt.Errorf("rank 0 at %s refused rank %d: %s: %w", cfg.DistInitAddr, cfg.Rank, strings.TrimPrefix(reply, "ERR "), errRejected)
	default:
		return nil, fmt.Errorf("rank 0 at %s answered %q, want OK or ERR: %w", cfg.DistInitAddr, reply, errRejected)
	}
}
