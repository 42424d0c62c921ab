package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// The client listener's bounds in TestClientListenerBounds: short, so the
// test runs in seconds.
const (
	clHeaderTimeout = 2 * time.Second
	clBodyTimeout   = 3 * time.Second
	clIdleTimeout   = 2 * time.Second
	clMaxUnauth     = 500
	// clFlood is how many unauthenticated connections send a partial body
	// at once: fewer than the bound, so each is answered.
	clFlood = 400
)

// slowChatModel decodes 20 tokens/s: a stream of 120 tokens lasts 6s,
// longer than every client timeout above.
const slowChatModel = `  - name: sim-slow
    source: sim://slow
    context_length: 4096
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m, args: ["--decode-tps", "20"] }
`

// TestClientListenerBounds attacks the client listener of a control plane
// running as its own process, as issue 16 (item 2) did: a flood of
// unauthenticated connections that each send a partial body is answered
// with 401 at once and closed, and the server's file descriptors and
// goroutines return to their baseline; a stalled authenticated body is cut
// at timeouts.client_body; the connections that have not authenticated
// are bounded by limits.max_unauthenticated_conns while authenticated
// streams do not count; a partial header is cut at timeouts.client_header;
// an idle keep-alive is closed at timeouts.client_idle; and a stream that
// lasts longer than all of them completes.
func TestClientListenerBounds(t *testing.T) {
	c := testcluster.NewCluster(t, binary, testcluster.Options{Grace: "10s", Models: slowChatModel,
		Configure: func(s *config.Server) {
			s.Timeouts.ClientHeader, s.Timeouts.ClientBody, s.Timeouts.ClientIdle = clHeaderTimeout, clBodyTimeout, clIdleTimeout
			s.Limits.MaxUnauthenticatedConns = clMaxUnauth
		}})
	c.StartAgent(testcluster.NodeSpec{ID: "node01"})
	mc := c.ManageClient()
	testcluster.WaitFor(t, "sim-slow serving", 90*time.Second, func() (bool, string) {
		m, err := mc.GetModel(t.Context(), &managev1.GetModelRequest{Name: "sim-slow"})
		if err != nil {
			return false, err.Error()
		}
		return m.GetStatus().GetState() == "serving", m.GetStatus().GetState()
	})
	addr := strings.TrimSuffix(strings.TrimPrefix(c.Client, "http://"), "/v1")
	pid := c.Server.Cmd.Process.Pid
	res := serverResources{t: t, pid: pid, metrics: c.MetricsURL()}
	baseFDs, baseG := res.settled()
	t.Logf("baseline: %d fds, %d goroutines", baseFDs, baseG)

	// Streams that outlast every client timeout run through the test;
	// being authenticated, they do not count against the bound.
	streams, started := make(chan error, 3), make(chan struct{}, 3)
	for range cap(streams) {
		go func() { streams <- slowStream(addr, c.APIKey, 120, started) }()
	}
	for range cap(streams) {
		select {
		case <-started:
		case err := <-streams:
			t.Fatalf("a stream ended before the attacks: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the streams did not start within 30s")
		}
	}
	// The streams hold connections of their own (client and engine side):
	// what the flood may leave behind is measured against this.
	streamFDs, streamG := res.settled()
	t.Logf("with the streams running: %d fds, %d goroutines", streamFDs, streamG)

	t.Run("partial bodies without a key get 401 at once", func(t *testing.T) {
		start := time.Now()
		outcomes := make([]connOutcome, clFlood)
		conns := make([]net.Conn, clFlood)
		defer func() {
			for _, conn := range conns {
				if conn != nil {
					conn.Close()
				}
			}
		}()
		var wg sync.WaitGroup
		for i := range outcomes {
			wg.Go(func() {
				auth := ""
				if i%2 == 1 {
					auth = "Authorization: Bearer sk-llmgw-not-a-real-key\r\n"
				}
				outcomes[i], conns[i] = roundTripOpen(addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: llmgw\r\n"+auth+
					"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"model\":\"sim-slow\",", 2*clBodyTimeout)
			})
		}
		wg.Wait()
		var answered, slowest time.Duration
		var bad []string
		for _, o := range outcomes {
			if o.status != http.StatusUnauthorized || !o.closed || !o.connClose || !strings.Contains(o.body, `"type":"authentication_error"`) {
				bad = append(bad, o.String())
			}
			answered, slowest = max(answered, o.answered), max(slowest, o.elapsed)
		}
		t.Logf("%d connections in %s: %d answered 401 with Connection: close (the last answer after %s) and closed (the last after %s)",
			clFlood, time.Since(start).Round(time.Millisecond), clFlood-len(bad), answered.Round(time.Millisecond), slowest.Round(time.Millisecond))
		// Measured while the clients still hold their ends open.
		res.within(t, "after the flood", streamFDs, streamG)
		if len(bad) > 0 {
			t.Fatalf("%d of %d connections were not answered 401 with Connection: close and closed; first: %s", len(bad), clFlood, bad[0])
		}
		// Answered and closed at once: the body timeout did not end them.
		if slowest >= clBodyTimeout {
			t.Errorf("the slowest connection took %s, not less than timeouts.client_body %s: the answer waited for the body", slowest, clBodyTimeout)
		}
	})

	t.Run("an authenticated stalled body is cut at the body timeout", func(t *testing.T) {
		const n = 20
		outcomes := make([]connOutcome, n)
		var wg sync.WaitGroup
		for i := range outcomes {
			wg.Go(func() {
				outcomes[i] = roundTrip(addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: llmgw\r\nAuthorization: Bearer "+c.APIKey+
					"\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"model\":\"sim-slow\",", 3*clBodyTimeout)
			})
		}
		wg.Wait()
		for _, o := range outcomes {
			if o.status != http.StatusRequestTimeout || !o.closed || !strings.Contains(o.body, "timeouts.client_body") && !strings.Contains(o.body, "did not arrive") {
				t.Fatalf("a stalled body: %s; want 408 and the connection closed", o)
			}
			if o.elapsed < clBodyTimeout-200*time.Millisecond || o.elapsed > clBodyTimeout+2*time.Second {
				t.Errorf("a stalled body was cut after %s, want about timeouts.client_body %s", o.elapsed, clBodyTimeout)
			}
		}
		t.Logf("%d stalled bodies answered 408 after %s–%s", n, minElapsed(outcomes).Round(time.Millisecond), maxElapsed(outcomes).Round(time.Millisecond))
	})

	t.Run("unauthenticated connections are bounded; partial headers are cut at the header timeout", func(t *testing.T) {
		// Fill the bound with connections that never finish their
		// headers. The streams running meanwhile do not count: were they
		// counted, the probe below would already be refused.
		stalled := make([]net.Conn, 0, clMaxUnauth)
		firstSent := time.Now()
		for range clMaxUnauth - 1 {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: llmgw\r\nX-Slow: "); err != nil {
				t.Fatal(err)
			}
			stalled = append(stalled, conn)
		}
		opened := time.Now()
		probe := "GET /v1/models HTTP/1.1\r\nHost: llmgw\r\nAuthorization: Bearer " + c.APIKey + "\r\n\r\n"
		if o := roundTrip(addr, probe, clHeaderTimeout); o.status != http.StatusOK {
			t.Fatalf("with %d unauthenticated connections and %d streams open, a request on a new connection: %s; want 200", clMaxUnauth-1, cap(streams), o)
		}
		// The last free place is taken; the next connection is closed.
		last, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer last.Close()
		stalled = append(stalled, last)
		if o := roundTrip(addr, probe, clHeaderTimeout); o.status != 0 || !o.closed {
			t.Fatalf("over limits.max_unauthenticated_conns (%d): %s; want the connection closed unanswered", clMaxUnauth, o)
		}
		// The header timeout ends every stalled connection, and nothing
		// ends them before it.
		var firstCut time.Duration
		for i, conn := range stalled {
			_ = conn.SetReadDeadline(opened.Add(clHeaderTimeout + 3*time.Second))
			_, err := io.ReadAll(conn)
			if err != nil && !isReset(err) {
				t.Fatalf("a partial header was not cut by timeouts.client_header %s: %v", clHeaderTimeout, err)
			}
			if i == 0 {
				firstCut = time.Since(firstSent)
			}
		}
		t.Logf("%d partial headers cut: the first after %s, all within %s of the last", len(stalled), firstCut.Round(time.Millisecond), time.Since(opened).Round(time.Millisecond))
		if firstCut < clHeaderTimeout-200*time.Millisecond {
			t.Errorf("a partial header was cut after %s, before timeouts.client_header %s", firstCut, clHeaderTimeout)
		}
		if o := roundTrip(addr, probe, clHeaderTimeout); o.status != http.StatusOK {
			t.Fatalf("after the stalled connections were cut, a request: %s; want 200", o)
		}
	})

	t.Run("an idle keep-alive is closed at the idle timeout", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(clIdleTimeout + 5*time.Second))
		if _, err := io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: llmgw\r\nAuthorization: Bearer "+c.APIKey+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("GET /v1/models = %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		idle := time.Now()
		_, err = br.ReadByte()
		elapsed := time.Since(idle)
		if !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("an idle keep-alive after %s: %v; want it closed by the server", elapsed, err)
		}
		t.Logf("idle keep-alive closed after %s", elapsed.Round(time.Millisecond))
		if elapsed < clIdleTimeout-200*time.Millisecond {
			t.Errorf("the idle keep-alive was closed after %s, before timeouts.client_idle %s", elapsed, clIdleTimeout)
		}
	})

	t.Run("streams longer than every client timeout complete", func(t *testing.T) {
		for range cap(streams) {
			select {
			case err := <-streams:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a stream did not end within 30s")
			}
		}
	})

	res.within(t, "at the end", baseFDs, baseG)
}

// connOutcome is what a raw HTTP/1.1 exchange on a fresh connection saw.
type connOutcome struct {
	status    int // 0: no response
	body      string
	connClose bool          // the response said Connection: close
	closed    bool          // the server closed the connection after it
	answered  time.Duration // when the answer's headers were in
	elapsed   time.Duration // when the connection ended, or the wait did
	err       error
}

func (o connOutcome) String() string {
	return fmt.Sprintf("status %d after %s, closed %v, Connection: close %v, ended after %s, err %v, body %q",
		o.status, o.answered.Round(time.Millisecond), o.closed, o.connClose, o.elapsed.Round(time.Millisecond), o.err, o.body)
}

// roundTrip sends req (which may stop short) on a new connection, reads
// a response if one comes, and waits up to wait in all for the server to
// close the connection.
func roundTrip(addr, req string, wait time.Duration) connOutcome {
	o, conn := roundTripOpen(addr, req, wait)
	if conn != nil {
		conn.Close()
	}
	return o
}

// roundTripOpen is roundTrip leaving the client's end of the connection
// open, for the caller to close: a client that stalls keeps its end open.
func roundTripOpen(addr, req string, wait time.Duration) (connOutcome, net.Conn) {
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return connOutcome{err: err}, nil
	}
	o := rawExchange(conn, start, req, wait)
	return o, conn
}

func rawExchange(conn net.Conn, start time.Time, req string, wait time.Duration) connOutcome {
	_ = conn.SetDeadline(start.Add(wait))
	var o connOutcome
	if _, err := io.WriteString(conn, req); err != nil && !isReset(err) {
		o.err = err
		return o
	}
	br := bufio.NewReader(conn)
	if _, err := br.Peek(1); err != nil {
		o.elapsed = time.Since(start)
		if errors.Is(err, io.EOF) || isReset(err) {
			o.closed = true
		} else {
			o.err = err
		}
		return o
	}
	resp, err := http.ReadResponse(br, nil)
	o.answered = time.Since(start)
	if err != nil {
		o.err = err
		o.elapsed = time.Since(start)
		return o
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	o.status, o.body, o.connClose = resp.StatusCode, string(b), resp.Close
	if !resp.Close {
		// A kept-alive connection stays open; only the answer counts.
		o.elapsed = time.Since(start)
		return o
	}
	_, err = br.ReadByte()
	o.elapsed = time.Since(start)
	if errors.Is(err, io.EOF) || isReset(err) {
		o.closed = true
	} else {
		o.err = fmt.Errorf("after Connection: close: %w", err)
	}
	return o
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

func minElapsed(outs []connOutcome) time.Duration {
	m := outs[0].elapsed
	for _, o := range outs {
		m = min(m, o.elapsed)
	}
	return m
}

func maxElapsed(outs []connOutcome) time.Duration {
	var m time.Duration
	for _, o := range outs {
		m = max(m, o.elapsed)
	}
	return m
}

// slowStream streams a chat completion of tokens tokens, signals started
// when its answer begins, and checks that it ends with [DONE].
func slowStream(addr, key string, tokens int, started chan<- struct{}) error {
	body := `{"model":"sim-slow","stream":true,"max_tokens":` + strconv.Itoa(tokens) + `,"messages":[{"role":"user","content":"tell me a long story"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(tokens)*time.Second+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("stream: status %d: %s", resp.StatusCode, b)
	}
	started <- struct{}{}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("stream cut after %s: %w", time.Since(start).Round(time.Millisecond), err)
	}
	if !bytes.Contains(b, []byte("data: [DONE]")) {
		return fmt.Errorf("stream ended after %s without [DONE]: %.200q", time.Since(start).Round(time.Millisecond), b)
	}
	if d := time.Since(start); d < clHeaderTimeout+clBodyTimeout {
		return fmt.Errorf("the stream lasted %s, not longer than the client timeouts: the test proves nothing", d)
	}
	return nil
}

// metricValue sums the samples of a metric family on /metrics.
func metricValue(url, name string) (float64, bool) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// serverResources reads a server process's open file descriptors (from
// /proc) and goroutines (from its metrics).
type serverResources struct {
	t       *testing.T
	pid     int
	metrics string
}

func (r serverResources) now() (fds, goroutines int) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", r.pid))
	if err != nil {
		r.t.Fatal(err)
	}
	g, _ := metricValue(r.metrics, "go_goroutines")
	return len(ents), int(g)
}

// within waits up to 15s for the server's counts to fall to at most 10
// fds and 20 goroutines above fds and goroutines (read before, when), and
// fails t when they do not: what a closed connection held goes back when
// its goroutine ends, which a run of equal readings (settled) can precede.
func (r serverResources) within(t *testing.T, when string, fds, goroutines int) {
	t.Helper()
	maxFDs, maxG := fds+10, goroutines+20
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) { // polling interval
		f, g := r.now()
		if f <= maxFDs && g <= maxG {
			t.Logf("%s: %d fds (%d before), %d goroutines (%d before)", when, f, fds, g, goroutines)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("resources held %s: %d fds (%d before, at most %d), %d goroutines (%d before, at most %d)", when, f, fds, maxFDs, g, goroutines, maxG)
			return
		}
	}
}

// settled returns the counts once they stop falling: the lowest of a
// run of readings, waiting at most 15s (the bounds in this test are 3s).
func (r serverResources) settled() (fds, goroutines int) {
	fds, goroutines = r.now()
	deadline := time.Now().Add(15 * time.Second)
	stable := 0
	for stable < 5 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond) // polling interval
		f, g := r.now()
		if f >= fds && g >= goroutines {
			stable++
		} else {
			stable = 0
		}
		fds, goroutines = min(fds, f), min(goroutines, g)
	}
	return fds, goroutines
}
