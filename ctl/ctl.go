// Package ctl is the operator CLI, `llmgw ctl`: it reads and changes the
// cluster through the control plane's management API (gRPC over TLS with an
// admin bearer token) and issues the certificates the fleet runs on.
package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/llmgw/llmgw/internal/cliflags"
)

// Environment variables the connection flags default to.
const (
	EnvEndpoint = "LLMGW_ENDPOINT"
	EnvToken    = "LLMGW_TOKEN"
	EnvCACert   = "LLMGW_CA_CERT"
)

// Exit codes returned by Run.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const usageText = `usage: llmgw ctl <command> [arguments] [flags]

cluster (management API; every command takes --endpoint, --token, --ca-cert,
--server-name and --timeout, or LLMGW_ENDPOINT, LLMGW_TOKEN, LLMGW_CA_CERT):
  login --email E [--password-file F | --password -]
                                 an administrator's admin token, printed as
                                 shell: eval "$(llmgw ctl login --email E)"
  logout                         revoke the token from login that LLMGW_TOKEN holds
  status                         version, nodes, models, replicas, GPUs in use
  nodes [--json]                 nodes with their GPUs, memory, fabrics and replicas
  drain NODE [--cancel|--force]  move a node's replicas elsewhere (or stop doing so)
  check-engines NODE [--wait 60s]
                                 run a node's engine checks again and print them;
                                 exit 1 when an engine cannot start
  tool-check MODEL [--extra JSON] [--wait 60s] [--json]
                                 send a ready replica a chat request with a tool: are
                                 calls structured, plain text (parser mismatch) or
                                 refused, and which engine flag fixes it; exit 1 for
                                 text or refused, 3 when the answer had no call
  rollout MODEL                  replace the model's stale replicas (profile changed)
                                 one at a time, each replacement ready first
  weights [--node N] [--json]    each node's weights cache: entries, who uses them, what could be freed
  weights --collect [--dry-run] [--node N] [--wait 60s]
                                 delete the cached weights no catalog model and no live
                                 shard uses; exit 1 when a node could not collect
  fabrics [--json]               declared fabrics and the nodes in them
  models [--json]                catalog models and whether they are serving
  replicas [--model M] [--json]  replicas, their shards and why failed ones failed
  explain-placement MODEL [--json]
                                 every candidate node and why it was or was not chosen
  model add -f FILE [--update]   create (or update) a model from a YAML definition
  model get NAME [--json]        print a model's definition and status
  model rm NAME                  delete a model stored through the API
  scale MODEL N [--max M]        run exactly N replicas (scaling.min and max N; 0 stops
                                 it); --max M above N scales with load, 0 --max M loads
                                 on demand; --min/--max set either bound
  bench MODEL [--save] [--target 1s]
                                 measure the requests a replica carries at once at a p90
                                 time to first token (real requests through the client API,
                                 LLMGW_BASE_URL and LLMGW_API_KEY); --save makes it the weight

tenancy (same connection flags; every listing takes --json):
  projects [create|update|delete NAME] [--rpm N] [--tpm N] [--allow M,M]
              [--threads-retain-hours H] [--memory-retain-hours H]
                                 projects: the unit of limits, budgets and keys
  keys [--project P] [--all]     API keys (never their secrets)
  keys create NAME [--project P] [--expires 30d] [--rpm N] [--tpm N]
                                 create a key; its secret is printed this once
  keys update ID [--rpm N] [--tpm N] | keys revoke ID
  budgets [--project P]          budgets, what was spent this period, warnings
  budgets set PROJECT --period day|month|total --amount X [--on-exhausted refuse|fallback] [--fallback M]
              [--fallback-allowance Y]
  budgets delete PROJECT --period P
  prices                         every model's price and auth.default_price
  usage [--project P] [--model M] [--since 7d] [--until T] [--by-day] [--rows]
                                 usage totals by project and model (and day), or the requests

certificates (files only, no cluster needed):
  cert init-ca --dir D [--force]
  cert issue-server NAME --host H [--host H2 ...] --dir D --out O [--validity 8760h]
  cert issue-node NODE --dir D --out O [--validity 8760h]

  help                           this text
`

// app is one invocation of the CLI: where it writes, where it reads its
// environment and what time it is.
type app struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	env    func(string) string
	now    func() time.Time
}

// Run executes `llmgw ctl` with args (the words after "ctl") and returns the
// process exit code: 0 on success, 1 when the command failed, 2 on bad usage.
// env looks up environment variables (os.Getenv in the binary); a nil env
// reads nothing. `login` reads a password from the process's stdin.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	if env == nil {
		env = func(string) string { return "" }
	}
	a := &app{stdin: os.Stdin, stdout: stdout, stderr: stderr, env: env, now: time.Now}
	return a.run(ctx, args)
}

func (a *app) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usageText)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(a.stdout, usageText)
		return exitOK
	case "status":
		return a.cmdStatus(ctx, rest)
	case "nodes":
		return a.cmdNodes(ctx, rest)
	case "drain":
		return a.cmdDrain(ctx, rest)
	case "check-engines":
		return a.cmdCheckEngines(ctx, rest)
	case "tool-check":
		return a.cmdToolCheck(ctx, rest)
	case "rollout":
		return a.cmdRollout(ctx, rest)
	case "weights":
		return a.cmdWeights(ctx, rest)
	case "fabrics":
		return a.cmdFabrics(ctx, rest)
	case "models":
		return a.cmdModels(ctx, rest)
	case "replicas":
		return a.cmdReplicas(ctx, rest)
	case "explain-placement":
		return a.cmdExplain(ctx, rest)
	case "model":
		return a.cmdModel(ctx, rest)
	case "scale":
		return a.cmdScale(ctx, rest)
	case "bench":
		return a.cmdBench(ctx, rest)
	case "cert":
		return a.cmdCert(rest)
	case "projects":
		return a.cmdProjects(ctx, rest)
	case "keys":
		return a.cmdKeys(ctx, rest)
	case "budgets":
		return a.cmdBudgets(ctx, rest)
	case "prices":
		return a.cmdPrices(ctx, rest)
	case "usage":
		return a.cmdUsage(ctx, rest)
	case "login":
		return a.cmdLogin(ctx, rest)
	case "logout":
		return a.cmdLogout(ctx, rest)
	}
	fmt.Fprintf(a.stderr, "llmgw ctl: unknown command %q\n\n", cmd)
	fmt.Fprint(a.stderr, usageText)
	return exitUsage
}

// runGroup runs the subcommand of a command group (`model`, `cert`) that
// args[0] names; usage is the group's usage text.
func (a *app) runGroup(group, usage string, args []string, cmds map[string]func(args []string) int) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(a.stdout, usage)
		return exitOK
	}
	if cmd, ok := cmds[args[0]]; ok {
		return cmd(args[1:])
	}
	fmt.Fprintf(a.stderr, "llmgw ctl %s: unknown command %q\n", group, args[0])
	fmt.Fprint(a.stderr, usage)
	return exitUsage
}

// errorf prints a failure the way every command reports one and returns the
// exit code for it.
func (a *app) errorf(format string, args ...any) int {
	fmt.Fprintf(a.stderr, "llmgw ctl: "+format+"\n", args...)
	return exitError
}

// usageErrorf reports bad input for one command, with that command's usage.
func (a *app) usageErrorf(fs *flag.FlagSet, format string, args ...any) int {
	_ = cliflags.UsageErrorf(fs, format, args...)
	return exitUsage
}

// newFlagSet makes the flag set of one subcommand, named "llmgw ctl
// NAME"; its usage line says how the command is called.
func (a *app) newFlagSet(name, synopsis string) *flag.FlagSet {
	return cliflags.New("llmgw ctl "+name, "llmgw ctl "+synopsis, a.stderr)
}

// parse parses flags and exactly want positionals (what names them when
// missing) and turns its outcome into an exit code when the command should
// stop: 0 after -h, 2 after bad flags or the wrong number of positionals,
// reported as "llmgw ctl CMD: ..." with the usage.
func (a *app) parse(fs *flag.FlagSet, args []string, want int, what string) ([]string, int, bool) {
	return a.parseRange(fs, args, want, want, what)
}

// parseRange is parse for a command whose last positionals are optional:
// it takes from least to most of them.
func (a *app) parseRange(fs *flag.FlagSet, args []string, least, most int, what string) ([]string, int, bool) {
	pos, err := cliflags.ParseRange(fs, args, least, most, what)
	if err != nil {
		return nil, cliflags.ExitCode(err), false
	}
	return pos, exitOK, true
}
