package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// processesMentioning lists the pids whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// TestDev runs `llmgw dev` as a newcomer would: it must serve the three demo
// models (sim-mirrored's weights fetched through its mirror, which counts
// their bytes sent once), write the env file it promises, answer an OpenAI
// client and `llmgw ctl`, leave no process behind on SIGINT, and reuse its
// directory (an agent's cache keeps the weights: the mirror sends them again
// only to a node that lacks them).
func TestDev(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	base := testcluster.DevPortBase(t)
	envPath := filepath.Join(dir, "env")

	runOnce := func() map[string]string {
		_ = os.Remove(envPath)
		cachedBefore := len(cachedFilesOfSize(dir, 512<<10))
		dev := testcluster.Start(t, binary, "dev", "dev", "--dir", dir, "--port-base", strconv.Itoa(base))
		testcluster.WaitFor(t, "llmgw dev to write "+envPath, 90*time.Second, func() (bool, string) {
			_, err := os.Stat(envPath)
			select {
			case <-dev.Done:
				t.Fatalf("llmgw dev exited:\n%s", testcluster.Tail(dev.Output(), 30))
			default:
			}
			return err == nil, testcluster.Tail(dev.Output(), 3)
		})
		env := testcluster.ReadDevEnv(t, envPath)
		for _, k := range []string{"LLMGW_BASE_URL", "OPENAI_BASE_URL", "LLMGW_API_KEY", "OPENAI_API_KEY", "LLMGW_ENDPOINT", "LLMGW_TOKEN", "LLMGW_CA_CERT", "LLMGW_CA_KEY", "LLMGW_MIRROR_URL"} {
			if env[k] == "" {
				t.Fatalf("env file lacks %s: %v", k, env)
			}
		}
		if !strings.Contains(dev.Output(), "curl") {
			t.Fatalf("llmgw dev did not print a ready-to-paste curl:\n%s", dev.Output())
		}
		client := openai.NewClient(option.WithBaseURL(env["OPENAI_BASE_URL"]), option.WithAPIKey(env["OPENAI_API_KEY"]), option.WithMaxRetries(0))
		for _, model := range []string{"chat", "sim-2node", "sim-mirrored"} {
			resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model:    model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			})
			if err != nil || resp.Choices[0].Message.Content == "" {
				t.Fatalf("%s: %v", model, err)
			}
		}
		// The mirror is new on each start: it sent the file once to each
		// node whose cache gained it, and nothing to a node that held it.
		cached := cachedFilesOfSize(dir, 512<<10)
		fetched := len(cached) - cachedBefore
		if len(cached) == 0 || fetched > 1 {
			t.Fatalf("agents' caches hold %v of the mirrored file's size (%d before): want one more at most, and one at least", cached, cachedBefore)
		}
		if got, want := mirrorServed(t, dir, base+6), float64(fetched*512<<10); got != want {
			t.Fatalf("the dev mirror served %v bytes of sim-mirrored, want %v (%d nodes fetched it)", got, want, fetched)
		}
		ctl := exec.Command(binary, "ctl", "nodes")
		ctl.Env = os.Environ()
		for k, v := range env {
			ctl.Env = append(ctl.Env, k+"="+v)
		}
		out, err := ctl.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "node03") || strings.Count(string(out), "ready") != 3 {
			t.Fatalf("llmgw ctl nodes: %v\n%s", err, out)
		}

		if err := dev.Cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-dev.Done:
		case <-time.After(60 * time.Second):
			t.Fatalf("llmgw dev did not stop on SIGINT:\n%s", testcluster.Tail(dev.Output(), 20))
		}
		if code := dev.Cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("llmgw dev exited %d:\n%s", code, testcluster.Tail(dev.Output(), 20))
		}
		if left := processesMentioning(dir); len(left) > 0 {
			t.Fatalf("processes left behind after SIGINT:\n%s", strings.Join(left, "\n"))
		}
		return env
	}

	first := runOnce()
	second := runOnce()
	if first["OPENAI_API_KEY"] != second["OPENAI_API_KEY"] || first["LLMGW_TOKEN"] != second["LLMGW_TOKEN"] {
		t.Fatal("a second start on the same directory did not reuse its credentials")
	}
}

// startDev starts `llmgw dev` on dir and waits until it serves (its env
// file written); it returns the process and the env file's variables.
func startDev(t *testing.T, dir string) (*testcluster.Proc, map[string]string) {
	t.Helper()
	envPath := filepath.Join(dir, "env")
	dev := testcluster.Start(t, binary, "dev", "dev", "--dir", dir, "--port-base", strconv.Itoa(testcluster.DevPortBase(t)))
	testcluster.WaitFor(t, "llmgw dev to write "+envPath, 120*time.Second, func() (bool, string) {
		_, err := os.Stat(envPath)
		select {
		case <-dev.Done:
			t.Fatalf("llmgw dev exited:\n%s", testcluster.Tail(dev.Output(), 30))
		default:
		}
		return err == nil, testcluster.Tail(dev.Output(), 3)
	})
	return dev, testcluster.ReadDevEnv(t, envPath)
}

// waitExit waits for p to exit and checks it exited 0.
func waitExit(t *testing.T, p *testcluster.Proc, what string) {
	t.Helper()
	select {
	case <-p.Done:
	case <-time.After(60 * time.Second):
		t.Fatalf("llmgw dev did not stop on %s:\n%s", what, testcluster.Tail(p.Output(), 20))
	}
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("llmgw dev exited %d on %s:\n%s", code, what, testcluster.Tail(p.Output(), 20))
	}
}

// Regression (issue 16, item 5): on SIGTERM `llmgw dev` returned before
// its control plane had drained, so a stream in flight was cut and its
// usage row lost. It now stops as `llmgw server` does.
func TestDevStopFinishesStreamAndWritesUsage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	dev, env := startDev(t, dir)
	client := openai.NewClient(option.WithBaseURL(env["OPENAI_BASE_URL"]), option.WithAPIKey(env["OPENAI_API_KEY"]), option.WithMaxRetries(0))
	// sim-2node decodes 100 tokens/s: this stream lasts about 7 s, longer
	// than a sim engine's own 5 s grace on SIGTERM (so it must still be up),
	// shorter than the control plane's 10 s shutdown timeout.
	const tokens = 700
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "sim-2node",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer, please")},
		MaxTokens:     openai.Int(tokens),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithJSONSet("ignore_eos", true)) // the dev models end answers after 16 tokens otherwise
	acc := openai.ChatCompletionAccumulator{}
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	acc.AddChunk(stream.Current())
	if err := dev.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("the stream in flight at SIGTERM was cut: %v", err)
	}
	if acc.Usage.CompletionTokens != tokens {
		t.Fatalf("stream usage = %+v, want %d completion tokens", acc.Usage, tokens)
	}
	waitExit(t, dev, "SIGTERM")
	if left := processesMentioning(dir); len(left) > 0 {
		t.Fatalf("processes left behind after SIGTERM:\n%s", strings.Join(left, "\n"))
	}

	st, err := store.Open(context.Background(), filepath.Join(dir, "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.ListUsage(context.Background(), store.UsageQuery{}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Stream && r.Status == 200 && r.CompletionTokens == tokens {
			return
		}
	}
	t.Fatalf("no usage row for the stream in flight at SIGTERM; rows: %+v", rows)
}

// Regression (issue 16, item 5): an agent of `llmgw dev` that died stayed a
// zombie, and nothing said it was gone. It is now reaped, logged and
// started again.
func TestDevRestartsADeadAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	dev, _ := startDev(t, dir)
	agentPID := func() (int, string) {
		procs := processesMentioning(filepath.Join(dir, "nodes", "node03", "agent.yaml"))
		if len(procs) != 1 {
			return 0, fmt.Sprintf("%d agents of node03: %v", len(procs), procs)
		}
		pid, _ := strconv.Atoi(procs[0][:strings.IndexByte(procs[0], ':')])
		return pid, procs[0]
	}
	pid, state := agentPID()
	if pid == 0 {
		t.Fatal(state)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, "the killed agent reaped (not a zombie)", 30*time.Second, func() (bool, string) {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		return err != nil, string(stat)
	})
	testcluster.WaitFor(t, "llmgw dev to report the dead agent and start it again", 30*time.Second, func() (bool, string) {
		out := dev.Output()
		exited := strings.Contains(out, `msg="agent exited" node=node03 pid=`+strconv.Itoa(pid)+` status="signal: killed"`)
		again, _ := agentPID()
		return exited && again != 0 && again != pid && strings.Contains(out, `msg="agent restarted" node=node03`), testcluster.Tail(out, 5)
	})
	testcluster.WaitFor(t, "node03's new agent connected", 60*time.Second, func() (bool, string) {
		n := 0
		for _, line := range strings.Split(dev.Output(), "\n") {
			if strings.Contains(line, `msg="agent connected"`) && strings.Contains(line, " node=node03 ") {
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d sessions of node03", n)
	})
	if err := dev.Cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitExit(t, dev, "SIGINT")
	if left := processesMentioning(dir); len(left) > 0 {
		t.Fatalf("processes left behind after SIGINT:\n%s", strings.Join(left, "\n"))
	}
}

// mirrorServed reads llmgw_mirror_served_bytes_total of sim-mirrored/dev
// from the dev mirror's metrics on its management port, presenting node01's
// certificate of the dev CA.
func mirrorServed(t *testing.T, dir string, port int) float64 {
	t.Helper()
	pkiDir := filepath.Join(dir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "node01.pem"), filepath.Join(pkiDir, "node01-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	resp, err := c.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err != nil {
		t.Fatalf("the dev mirror's metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `llmgw_mirror_served_bytes_total{model="sim-mirrored",version="dev"} `) {
			v, err := strconv.ParseFloat(strings.Fields(line)[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// cachedFilesOfSize lists the files of size bytes in the dev nodes'
// weights caches.
func cachedFilesOfSize(dir string, size int64) []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(dir, "nodes"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(p, string(filepath.Separator)+"weights"+string(filepath.Separator)) {
			return nil
		}
		if st, err := d.Info(); err == nil && st.Size() == size {
			out = append(out, p)
		}
		return nil
	})
	return out
}
