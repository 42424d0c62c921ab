package e2e

import (
	"context"
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

// TestDev runs `llmgw dev` as a newcomer would: it must serve both demo
// models, write the env file it promises, answer an OpenAI client and `llmgw
// ctl`, leave no process behind on SIGINT, and reuse its directory.
func TestDev(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	base := testcluster.DevPortBase(t)
	envPath := filepath.Join(dir, "env")

	runOnce := func() map[string]string {
		_ = os.Remove(envPath)
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
		for _, k := range []string{"LLMGW_BASE_URL", "OPENAI_BASE_URL", "LLMGW_API_KEY", "OPENAI_API_KEY", "LLMGW_ENDPOINT", "LLMGW_TOKEN", "LLMGW_CA_CERT", "LLMGW_CA_KEY"} {
			if env[k] == "" {
				t.Fatalf("env file lacks %s: %v", k, env)
			}
		}
		if !strings.Contains(dev.Output(), "curl") {
			t.Fatalf("llmgw dev did not print a ready-to-paste curl:\n%s", dev.Output())
		}
		client := openai.NewClient(option.WithBaseURL(env["OPENAI_BASE_URL"]), option.WithAPIKey(env["OPENAI_API_KEY"]), option.WithMaxRetries(0))
		for _, model := range []string{"chat", "sim-2node"} {
			resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model:    model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			})
			if err != nil || resp.Choices[0].Message.Content == "" {
				t.Fatalf("%s: %v", model, err)
			}
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
