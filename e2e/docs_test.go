package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

// A doc block is a fenced code block of an operator page whose info string
// starts with sh. It runs, in a bash that keeps the page's working directory
// and exported variables from one block to the next, and must exit 0; the
// info string can say otherwise:
//
//	```sh                 run it; exit 0
//	```sh exit=1          run it; it must exit 1
//	```sh norun REASON…   shown, not run (needs GPUs, Proxmox, a real host)
type docBlock struct {
	page string
	line int // of the opening fence
	code string
	// exit is the status the block must end with; -1 for norun.
	exit   int
	reason string // why a norun block does not run
}

// docPageBlocks extracts the sh blocks of a markdown page.
func docPageBlocks(page, text string) ([]docBlock, error) {
	var out []docBlock
	var cur *docBlock
	var code strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "```") {
			if cur != nil {
				code.WriteString(line + "\n")
			}
			continue
		}
		if cur != nil { // closing fence
			cur.code = code.String()
			out = append(out, *cur)
			cur = nil
			continue
		}
		info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
		if len(info) == 0 || (info[0] != "sh" && info[0] != "bash") {
			// Another kind of block (output, YAML): skip to its end.
			for sc.Scan() {
				n++
				if strings.HasPrefix(strings.TrimSpace(sc.Text()), "```") {
					break
				}
			}
			continue
		}
		cur = &docBlock{page: page, line: n}
		code.Reset()
		for i := 1; i < len(info); i++ {
			switch w := info[i]; {
			case w == "norun":
				cur.exit = -1
				cur.reason = strings.Join(info[i+1:], " ")
				if cur.reason == "" {
					return nil, fmt.Errorf("%s:%d: a norun block must say why it does not run", page, n)
				}
				i = len(info)
			case strings.HasPrefix(w, "exit="):
				v, err := strconv.Atoi(strings.TrimPrefix(w, "exit="))
				if err != nil {
					return nil, fmt.Errorf("%s:%d: %q: %w", page, n, w, err)
				}
				cur.exit = v
			default:
				return nil, fmt.Errorf("%s:%d: unknown word %q in the info string (norun REASON, exit=N)", page, n, w)
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the block is not closed", page, cur.line)
	}
	return out, sc.Err()
}

func TestDocPageBlocks(t *testing.T) {
	page := "# t\n\n```sh\necho a\ncd x\n```\n\n```\noutput ```sh\n```\n\n```sh norun needs GPUs\nnvidia-smi\n```\n\n```sh exit=1\nfalse\n```\n\n```yaml\na: 1\n```\n"
	blocks, err := docPageBlocks("t.md", page)
	if err != nil {
		t.Fatal(err)
	}
	want := []docBlock{
		{page: "t.md", line: 3, code: "echo a\ncd x\n"},
		{page: "t.md", line: 12, code: "nvidia-smi\n", exit: -1, reason: "needs GPUs"},
		{page: "t.md", line: 16, code: "false\n", exit: 1},
	}
	if fmt.Sprint(blocks) != fmt.Sprint(want) {
		t.Errorf("blocks = %+v\nwant %+v", blocks, want)
	}
	for _, bad := range []string{"```sh norun\nx\n```\n", "```sh exit=x\nx\n```\n", "```sh maybe\nx\n```\n", "```sh\nx\n"} {
		if _, err := docPageBlocks("t.md", bad); err == nil {
			t.Errorf("docPageBlocks(%q) accepted it", bad)
		}
	}
}

// docPages are the operator pages whose command blocks run, in the order
// they run against one `llmgw dev` (the quickstart last: its destroy revokes
// the dev nodes), each with what its output must show somewhere.
var docPages = []struct {
	file string
	// devEnv: the page's commands expect the exports of an installation
	// (getting-started's step 5, tenancy's "llmgw ctl" setup): the shell
	// starts with llmgw dev's env file sourced instead.
	devEnv bool
	want   []string
	// rewrite are old, new pairs applied to the page's commands ("{root}"
	// in new is the sandbox): getting-started's installation steps run
	// with the sandbox standing in for / and without sudo.
	rewrite []string
	// files must exist in the sandbox after the page ran.
	files []string
}{
	{file: "README.md", want: []string{`"role":\s*"assistant"`, `model sim-2node \(1 replica running\)`, `node03\s+ready \(undeclared\)`,
		`node node01 cannot be drained: no other node can take what it runs:\s+replica r-\w+ of model sim-2node`}},
	{file: "docs/tenancy.md", devEnv: true, want: []string{`created project search`, `revoked key-\w+ \(search-ci\)`, `deleted project search`}},
	{file: "docs/monitoring.md", want: []string{`llmgw_requests_total\{model="sim-chat",project="default",status="200"\}`}},
	{
		file: "docs/getting-started.md", devEnv: true, want: []string{`created model qwen2.5-coder-3b-instruct`},
		rewrite: []string{"sudo ", "", "/etc/llmgw", "{root}/etc/llmgw"},
		files: []string{"etc/llmgw/pki/ca.pem", "etc/llmgw/pki/ca-key.pem", "etc/llmgw/server.pem", "etc/llmgw/server-key.pem",
			"etc/llmgw/ca.pem", "etc/llmgw/nodes/gpu-01.pem", "etc/llmgw/nodes/gpu-01-key.pem"},
	},
	{file: "examples/ci/README.md", want: []string{`changes=true`, `changes=false`, `Warning: No node can hold model ci-a100`,
		`Apply\s+will\s+store\s+the\s+model\s+and\s+then\s+fail\s+naming\s+why\s+no\s+node\s+can\s+hold\s+it`, `Apply complete!`, `HTTP/1.1 200`}},
	{file: "examples/quickstart/README.md", want: []string{
		`Plan: 3 to import, 5 to add, 3 to change, 0 to destroy.`, `"model":\s*"mine"`, `team\s+mine\s+1\s+`,
		`Plan: 0 to add, 0 to change, 8 to destroy.`, `Destroy complete! Resources: 8 destroyed.`,
	}},
}

// TestDocsRun runs the command blocks of the operator pages as a newcomer
// would, against `llmgw dev` started on free ports by the test in a copy of
// the repository's layout: a page that stops being true fails. Commands
// that name dev's default ports (127.0.0.1:8080-8086) are given the test's;
// terraform's confirmations are answered yes.
func TestDocsRun(t *testing.T) {
	tfacc.Require(t)
	if _, err := exec.LookPath("terraform"); err != nil && os.Getenv("TF_ACC_TERRAFORM_PATH") == "" {
		t.Fatal("terraform not found: set TF_ACC_TERRAFORM_PATH")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	root := docsSandbox(t, repo)
	base := testcluster.DevPortBase(t)
	devDir := filepath.Join(root, ".llmgw-dev")
	dev := testcluster.Start(t, binary, "dev", "dev", "--dir", devDir, "--port-base", strconv.Itoa(base))
	testcluster.WaitFor(t, "llmgw dev to write its env file", 120*time.Second, func() (bool, string) {
		select {
		case <-dev.Done:
			t.Fatalf("llmgw dev exited:\n%s", testcluster.Tail(dev.Output(), 30))
		default:
		}
		_, err := os.Stat(filepath.Join(devDir, "env"))
		return err == nil, testcluster.Tail(dev.Output(), 3)
	})
	var ports []string
	for i := 0; i <= 6; i++ {
		ports = append(ports, "127.0.0.1:"+strconv.Itoa(8080+i), "127.0.0.1:"+strconv.Itoa(base+i))
	}
	moved := strings.NewReplacer(ports...)

	for _, p := range docPages {
		text, err := os.ReadFile(filepath.Join(repo, p.file))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := docPageBlocks(p.file, string(text))
		if err != nil {
			t.Fatal(err)
		}
		sh := newDocShell(t, root, p.devEnv)
		var pairs []string
		for i, r := range p.rewrite {
			if i%2 == 1 {
				r = strings.ReplaceAll(r, "{root}", root)
			}
			pairs = append(pairs, r)
		}
		rewrite := strings.NewReplacer(pairs...)
		var all strings.Builder
		ran, failed := 0, false
		for _, b := range blocks {
			if b.exit < 0 {
				t.Logf("%s:%d: not run: %s", b.page, b.line, b.reason)
				continue
			}
			ran++
			start := time.Now()
			out, code := sh.run(rewrite.Replace(moved.Replace(b.code)))
			out = ansiEscape.ReplaceAllString(out, "") // terraform colours a terminal's output
			all.WriteString(out)
			t.Logf("%s:%d: exit %d in %s", b.page, b.line, code, time.Since(start).Round(time.Millisecond))
			if code != b.exit {
				failed = true
				t.Errorf("%s:%d: exit %d, want %d; the block:\n%s\noutput:\n%s\nllmgw dev:\n%s", b.page, b.line, code, b.exit, b.code, testcluster.Tail(out, 60), testcluster.Tail(dev.Output(), 10))
				break // the page's later blocks build on this one
			}
		}
		if failed {
			continue
		}
		if ran == 0 {
			t.Errorf("%s: no block ran", p.file)
		}
		for _, f := range p.files {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("%s: after its blocks ran: %v", p.file, err)
			}
		}
		for _, w := range p.want {
			if !regexp.MustCompile(w).MatchString(all.String()) {
				t.Errorf("%s: the output of its blocks lacks %s:\n%s", p.file, w, testcluster.Tail(all.String(), 80))
			}
		}
	}
}

// docsSandbox makes a directory laid out like the repository root: the
// source linked (so `go build ./cmd/...` works), examples/ copied without
// terraform state (the pages run terraform in it), bin/llmgw the test's
// binary, and no .llmgw-dev.
func docsSandbox(t *testing.T, repo string) string {
	t.Helper()
	root := t.TempDir()
	entries, err := os.ReadDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch name := e.Name(); name {
		case ".git", ".llmgw-dev", "bin", "examples":
		default:
			if err := os.Symlink(filepath.Join(repo, name), filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = filepath.WalkDir(filepath.Join(repo, "examples"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		name := d.Name()
		if name == ".terraform" || name == "plan.txt" || name == "tfplan" || strings.HasPrefix(name, "terraform.tfstate") || name == ".terraform.lock.hcl" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(root, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, rel), b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(root, "bin", "llmgw")); err != nil {
		t.Fatal(err)
	}
	return root
}

// docShell runs a page's blocks one after another, each in a fresh bash
// that starts where the last one ended: same directory, same exported
// variables (as a reader pasting them into one terminal).
type docShell struct {
	t     *testing.T
	state string
}

func newDocShell(t *testing.T, root string, devEnv bool) *docShell {
	t.Helper()
	state := t.TempDir()
	// The reader's shell: the repository root, llmgw on PATH (installed,
	// as getting-started says), no LLMGW_ or TF_ variables from the
	// machine (its TF_CLI_CONFIG_FILE names a file that does not exist).
	var env strings.Builder
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LLMGW_") || strings.HasPrefix(k, "TF_") || strings.HasPrefix(k, "OPENAI_") || strings.ContainsAny(k, "()%") {
			continue
		}
		if k == "PATH" {
			v = filepath.Join(root, "bin") + ":" + v
		}
		fmt.Fprintf(&env, "export %s=%s\n", k, shellQuote(v))
	}
	if tf := os.Getenv("TF_ACC_TERRAFORM_PATH"); tf != "" {
		fmt.Fprintf(&env, "export PATH=%s:\"$PATH\"\n", shellQuote(filepath.Dir(tf)))
	}
	env.WriteString("export CHECKPOINT_DISABLE=1\n")
	if devEnv {
		fmt.Fprintf(&env, "source %s\n", shellQuote(filepath.Join(root, ".llmgw-dev", "env")))
	}
	if err := os.WriteFile(filepath.Join(state, "env"), []byte(env.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "cwd"), []byte(root), 0o600); err != nil {
		t.Fatal(err)
	}
	return &docShell{t: t, state: state}
}

// run runs code and returns its output and exit status.
func (s *docShell) run(code string) (string, int) {
	s.t.Helper()
	script := fmt.Sprintf(`set -eo pipefail
source %[1]s/env
cd "$(cat %[1]s/cwd)"
trap 'rc=$?; pwd > %[1]s/cwd; export -p > %[1]s/env; exit $rc' EXIT
%[2]s`, s.state, code)
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = []string{"HOME=" + os.Getenv("HOME"), "PATH=/usr/bin:/bin"}
	// A reader answers terraform's "Enter a value:" with yes.
	cmd.Stdin = strings.NewReader(strings.Repeat("yes\n", 50))
	out, err := cmd.CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		s.t.Fatalf("running bash: %v", err)
	}
	return string(out), 0
}

// ansiEscape matches the colour codes terraform writes.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
