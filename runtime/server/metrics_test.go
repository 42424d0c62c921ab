package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/config"
)

// startServer runs a control plane on loopback port 0 with client
// authentication off, until the test ends.
func startServer(t *testing.T) *Server {
	t.Helper()
	dir := t.TempDir()
	caCert, _, err := pki.InitCA(dir, pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.IssueServer(dir, "llmgw-test", []string{"127.0.0.1"}, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Listen, cfg.AgentListen, cfg.ManageListen, cfg.MetricsListen, cfg.PprofListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.AgentTLS = config.TLS{CA: caCert, Cert: cert, Key: key}
	cfg.Auth.Enabled = false
	cfg.Auth.Store = filepath.Join(dir, "llmgw.db")
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg, "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server run: %v", err)
		}
	})
	return s
}

// get polls url until it answers (the listener is bound before Run serves
// it) and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// metrics_listen serves /metrics and nothing else, and /metrics carries the
// gateway's request metrics and the fleet's.
func TestMetricsListener(t *testing.T) {
	s := startServer(t)
	base := "http://" + s.Addr(ListenMetrics)
	client := "http://" + s.Addr(ListenClient)

	req, err := http.NewRequest(http.MethodPost, client+"/v1/chat/completions",
		strings.NewReader(`{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer anything") // auth is off: any key is the default project
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model answered %d", resp.StatusCode)
	}

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`llmgw_requests_total{model="",project="default",status="404"} 1`,
		`llmgw_admission_total{reason="admitted"} 0`,
		`llmgw_nodes{state="ready"} 0`,
		`llmgw_thread_turns_not_stored_total 0`,
		"# TYPE llmgw_reconcile_passes_total counter",
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The control plane leads (it is alone) and its reconciler counts the
	// passes it completes.
	passes := regexp.MustCompile(`(?m)^llmgw_reconcile_passes_total (\d+)$`)
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, body := get(t, base+"/metrics")
		if m := passes.FindStringSubmatch(body); m != nil && m[1] != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("llmgw_reconcile_passes_total did not grow from 0 in 10 s:\n%s", passes.FindString(body))
		}
		time.Sleep(50 * time.Millisecond) // polling a condition
	}
	for _, path := range []string{"/", "/debug/pprof/", "/debug/pprof/heap", "/v1/models", "/health", "/ready"} {
		if code, _ := get(t, base+path); code != http.StatusNotFound {
			t.Errorf("metrics listener GET %s = %d, want 404", path, code)
		}
	}
}
