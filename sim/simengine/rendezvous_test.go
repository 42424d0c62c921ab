package simengine

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rank is one Run in a goroutine.
type rank struct {
	logs   *logBuffer
	cancel context.CancelFunc
	done   chan error
}

func startRank(t *testing.T, cfg Config) *rank {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &rank{logs: &logBuffer{}, cancel: cancel, done: make(chan error, 1)}
	if cfg.ServedModelName == "" {
		cfg.ServedModelName = testModel
	}
	go func() { r.done <- Run(ctx, cfg, r.logs.logger()) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			// A test that cares how Run ended checks it with wait; here
			// only stopping matters, so the result is just logged.
			if err != nil {
				t.Logf("rank %d stopped: %v", cfg.Rank, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("rank %d did not stop", cfg.Rank)
		}
	})
	return r
}

// wait returns Run's result, failing the test if it takes too long.
func (r *rank) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // keep it for Cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return; logs:\n%s", r.logs)
		return nil
	}
}

func (r *rank) waitLog(t *testing.T, substr string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("log %q", substr), func() bool { return strings.Contains(r.logs.String(), substr) })
}

func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var port int
	if _, err := fmt.Sscan(p, &port); err != nil {
		t.Fatalf("port of %s: %v", addr, err)
	}
	return h, port
}

func healthy(addr string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func rankConfig(t *testing.T, r, world int, dist, httpAddr string) Config {
	host, port := hostPort(t, httpAddr)
	return Config{Host: host, Port: port, Rank: r, WorldSize: world, DistInitAddr: dist}
}

func TestRendezvousWorldOfThree(t *testing.T) {
	dist := freeAddr(t)
	httpAddrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}

	leader := startRank(t, rankConfig(t, 0, 3, dist, httpAddrs[0]))
	leader.waitLog(t, "waiting for workers")
	if dials(httpAddrs[0]) {
		t.Fatal("rank 0 accepts HTTP connections before any worker joined")
	}

	w1 := startRank(t, rankConfig(t, 1, 3, dist, httpAddrs[1]))
	leader.waitLog(t, "msg=\"worker joined\" rank=1")
	w1.waitLog(t, "joined rank 0")
	if dials(httpAddrs[0]) {
		t.Fatal("rank 0 accepts HTTP connections with one of two workers joined")
	}

	w2 := startRank(t, rankConfig(t, 2, 3, dist, httpAddrs[2]))
	waitFor(t, 10*time.Second, "rank 0 to serve /health", func() bool { return healthy(httpAddrs[0]) })
	leader.waitLog(t, "msg=\"worker joined\" rank=2")

	// Workers serve nothing, not even on the port they were given.
	for i, w := range []*rank{w1, w2} {
		if dials(httpAddrs[i+1]) {
			t.Errorf("worker %d accepts connections on %s", i+1, httpAddrs[i+1])
		}
		if strings.Contains(w.logs.String(), "msg=serving") {
			t.Errorf("worker %d logged that it serves:\n%s", i+1, w.logs)
		}
	}

	// Losing a worker breaks the replica: rank 0 stops with an error, and
	// the surviving worker follows when rank 0 goes away.
	w2.cancel()
	if err := w2.wait(t); err != nil {
		t.Fatalf("cancelled worker returned %v, want nil", err)
	}
	err := leader.wait(t)
	if err == nil || !strings.Contains(err.Error(), "worker rank 2 went away") {
		t.Fatalf("rank 0 returned %v, want worker rank 2 went away", err)
	}
	if dials(httpAddrs[0]) {
		t.Fatal("rank 0 still serves after losing a worker")
	}
	err = w1.wait(t)
	if err == nil || !strings.Contains(err.Error(), "rank 0 at "+dist+" went away") {
		t.Fatalf("worker 1 returned %v, want rank 0 went away", err)
	}
}

func TestRendezvousWorkerWaitsForRank0(t *testing.T) {
	dist := freeAddr(t)
	leaderHTTP := freeAddr(t)
	// The worker starts first and keeps dialling until rank 0 is up.
	w := startRank(t, rankConfig(t, 1, 2, dist, freeAddr(t)))
	w.waitLog(t, "rank 0 not reachable yet")
	leader := startRank(t, rankConfig(t, 0, 2, dist, leaderHTTP))
	waitFor(t, 10*time.Second, "rank 0 to serve /health", func() bool { return healthy(leaderHTTP) })

	leader.cancel()
	if err := leader.wait(t); err != nil {
		t.Fatalf("cancelled rank 0 returned %v, want nil", err)
	}
	if err := w.wait(t); err == nil || !strings.Contains(err.Error(), "went away") {
		t.Fatalf("worker returned %v after rank 0 stopped, want rank 0 went away", err)
	}
}

func TestRendezvousRejectsBadJoins(t *testing.T) {
	dist := freeAddr(t)
	leaderHTTP := freeAddr(t)
	leader := startRank(t, rankConfig(t, 0, 3, dist, leaderHTTP))
	leader.waitLog(t, "waiting for workers")
	startRank(t, rankConfig(t, 1, 3, dist, freeAddr(t)))
	leader.waitLog(t, "msg=\"worker joined\" rank=1")

	tests := []struct {
		line string
		want string
	}{
		{line: "JOIN 0 3", want: "ERR rank 0 is out of range 1-2"},
		{line: "JOIN 3 3", want: "ERR rank 3 is out of range 1-2"},
		{line: "JOIN -1 3", want: "ERR rank -1 is out of range 1-2"},
		{line: "JOIN 2 4", want: "ERR world size 4 does not match rank 0's 3"},
		{line: "JOIN x 3", want: `ERR rank "x" is not a number`},
		{line: "HELLO", want: `ERR malformed handshake "HELLO"`},
		{line: "JOIN 1 3", want: "ERR rank 1 has already joined"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", dist, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "%s\n", tt.line)
			reply, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatalf("reading reply: %v", err)
			}
			if !strings.HasPrefix(reply, tt.want) {
				t.Fatalf("reply %q, want prefix %q", reply, tt.want)
			}
		})
	}

	// A duplicate worker process gives up with the reason instead of retrying.
	dup := startRank(t, rankConfig(t, 1, 3, dist, freeAddr(t)))
	err := dup.wait(t)
	if err == nil || !strings.Contains(err.Error(), "refused rank 1: rank 1 has already joined") {
		t.Fatalf("duplicate worker returned %v, want a refusal", err)
	}
	if dials(leaderHTTP) {
		t.Fatal("rank 0 serves with a worker missing")
	}
}

func TestRendezvousWorkerRejoinsBeforeGroupForms(t *testing.T) {
	dist := freeAddr(t)
	leaderHTTP := freeAddr(t)
	leader := startRank(t, rankConfig(t, 0, 3, dist, leaderHTTP))
	leader.waitLog(t, "waiting for workers")

	first := startRank(t, rankConfig(t, 1, 3, dist, freeAddr(t)))
	leader.waitLog(t, "msg=\"worker joined\" rank=1")
	first.cancel()
	leader.waitLog(t, "worker left before all joined")

	startRank(t, rankConfig(t, 1, 3, dist, freeAddr(t)))
	startRank(t, rankConfig(t, 2, 3, dist, freeAddr(t)))
	waitFor(t, 10*time.Second, "rank 0 to serve /health", func() bool { return healthy(leaderHTTP) })
}
