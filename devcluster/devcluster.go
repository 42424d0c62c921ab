// Package devcluster runs a whole llmgw cluster on one machine for
// development and demos: a CA and certificates, the control plane with
// SQLite, three agents as child processes on simulated hardware (node01 and
// node02 on fabric ib-a, node03 with no fabric; eight simulated H100s each),
// a weights mirror in process, and a demo catalog served by sim engines, one
// of whose weights the agents fetch from that mirror.
package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/supervisor"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/server"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/spec"
)

// Options configure a dev cluster.
type Options struct {
	// Dir holds everything the cluster writes; reused on the next start.
	Dir string
	// PortBase: client API on PortBase, management +1, agents +2, metrics +3,
	// pprof +4, the mirror's bytes +5 and management +6; engines take ports
	// from PortBase+100 up.
	PortBase int
	// Binary is the llmgw executable the agents run.
	Binary  string
	Version string
	// Out receives the human-readable summary.
	Out    io.Writer
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the demo models to serve.
	ReadyTimeout time.Duration
}

// node describes one simulated machine.
type node struct {
	id     string
	fabric string
}

var devNodes = []node{{"node01", "ib-a"}, {"node02", "ib-a"}, {"node03", ""}}

// Demo model names.
const (
	ModelChat  = "sim-chat"
	Model2Node = "sim-2node"
	// ModelMirrored's weights come from the dev mirror.
	ModelMirrored = "sim-mirrored"
)

// demoModels are the models waitServing waits for.
var demoModels = []string{ModelChat, Model2Node, ModelMirrored}

// Run starts the cluster and blocks until ctx ends. It then stops the
// control plane as `llmgw server` stops (requests in flight finish, their
// usage is written, the store is closed) and only then every agent and
// engine it started.
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("resolving --dir %s: %w", o.Dir, err)
	}
	o.Dir = dir
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, off := range []int{0, 1, 2, 3, 4, 5, 6} {
		if err := portFree(o.PortBase + off); err != nil {
			return fmt.Errorf("port %d (port base %d + %d) is taken; is another dev cluster running? use --port-base: %w", o.PortBase+off, o.PortBase, off, err)
		}
	}
	if err := ensurePKI(dir); err != nil {
		return err
	}
	serverYAML := filepath.Join(dir, "server.yaml")
	if err := serverConfig(dir, o.PortBase).WriteFile(serverYAML, writtenBy); err != nil {
		return err
	}
	cfg, err := config.Load(serverYAML)
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, cfg, o.Version, o.Logger)
	if err != nil {
		return err
	}
	creds, err := ensureCredentials(ctx, dir, keys.New(srv.Store))
	if err != nil {
		return err
	}

	// The mirror stops last, once no agent can be fetching from it.
	stopMirror, err := startMirror(dir, o.PortBase, o.Logger)
	if err != nil {
		return err
	}
	defer stopMirror()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Deferred before the control plane's stop so that it runs after it: the agents, and with them the
	// engines, stop only once the control plane has drained.
	agents := &agentSet{log: o.Logger, binary: o.Binary, stopped: make(chan struct{})}
	defer agents.stop(dir)
	srvDone := make(chan error, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		srvDone <- srv.Run(ctx)
	}()
	// However Run returns, the control plane stops as `llmgw server` does:
	// no new requests, those in flight finish, usage is written, the store
	// is closed.
	defer func() {
		cancel()
		<-drained
	}()
	for i, n := range devNodes {
		cfgPath, err := prepareNode(dir, n, o.PortBase, i)
		if err != nil {
			return err
		}
		if err := agents.start(n.id, cfgPath, filepath.Join(dir, "logs", n.id+".log")); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Out, "llmgw dev: control plane on 127.0.0.1:%d, weights mirror on %s, three agents starting; logs in %s\n", o.PortBase, mirrorBytesURL(o.PortBase), filepath.Join(dir, "logs"))

	if err := waitServing(ctx, srv, o.ReadyTimeout, srvDone); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(o.Out, "llmgw dev: stopping")
			return nil // stopped while starting
		}
		return err
	}
	env := envLines(dir, o.PortBase, creds)
	fmt.Fprintf(o.Out, "\nllmgw dev is serving %s (alias chat), %s (two shards on node01+node02, fabric ib-a)\nand %s (an agent fetched its weights from the mirror: %s).\n\n", ModelChat, Model2Node, ModelMirrored, mirroredSource(o.PortBase))
	fmt.Fprintf(o.Out, "Environment (also in %s; `source` it):\n\n%s\n", filepath.Join(dir, "env"), env)
	fmt.Fprintf(o.Out, "Try:\n\n  curl -s http://127.0.0.1:%d/v1/chat/completions \\\n    -H \"Authorization: Bearer %s\" -H 'Content-Type: application/json' \\\n    -d '{\"model\": \"chat\", \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}'\n\n", o.PortBase, creds.APIKey)
	fmt.Fprintf(o.Out, "  source %s && %s ctl nodes\n\nCtrl-C stops the cluster and every process it started.\n", filepath.Join(dir, "env"), o.Binary)
	// The env file is written last: a script that waits for it finds the
	// cluster serving and everything above printed.
	if err := writeFileAtomic(filepath.Join(dir, "env"), []byte(env)); err != nil {
		return err
	}

	select {
	case <-ctx.Done():
	case err := <-srvDone:
		if err != nil {
			return err
		}
	}
	fmt.Fprintln(o.Out, "llmgw dev: stopping: the control plane finishes the requests in flight and writes their usage, then the agents stop")
	cancel()
	<-drained
	return nil
}

func portFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

func ensurePKI(dir string) error {
	pkiDir := filepath.Join(dir, "pki")
	if _, err := os.Stat(filepath.Join(pkiDir, "ca.pem")); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(pkiDir, 0o700); err != nil {
			return err
		}
		if _, _, err := pki.InitCA(pkiDir, pki.CAOptions{}); err != nil {
			return fmt.Errorf("creating the dev CA: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(pkiDir, "server.pem")); errors.Is(err, os.ErrNotExist) {
		if _, _, err := pki.IssueServer(pkiDir, "llmgw-dev", []string{"127.0.0.1", "localhost", "::1"}, pkiDir, 0); err != nil {
			return fmt.Errorf("issuing the dev server certificate: %w", err)
		}
	}
	for _, n := range devNodes {
		if _, err := os.Stat(filepath.Join(pkiDir, n.id+".pem")); errors.Is(err, os.ErrNotExist) {
			if _, _, err := pki.IssueNode(pkiDir, n.id, pkiDir, 0); err != nil {
				return fmt.Errorf("issuing the certificate of %s: %w", n.id, err)
			}
		}
	}
	return nil
}

// serverConfig is the dev control plane's configuration: the loader's
// defaults, loopback listeners from the port base, the dev PKI and store,
// short agent timings and the demo models.
func serverConfig(dir string, base int) config.Server {
	p := func(off int) string { return "127.0.0.1:" + strconv.Itoa(base+off) }
	pkiDir := filepath.Join(dir, "pki")
	s := config.Default()
	s.Listen, s.ManageListen, s.AgentListen, s.MetricsListen, s.PprofListen = p(0), p(1), p(2), p(3), p(4)
	s.AgentTLS = config.TLS{CA: filepath.Join(pkiDir, "ca.pem"), Cert: filepath.Join(pkiDir, "server.pem"), Key: filepath.Join(pkiDir, "server-key.pem")}
	s.Auth.Store = filepath.Join(dir, "llmgw.db")
	s.Agents.HeartbeatInterval = 2 * time.Second
	s.Agents.Grace = 15 * time.Second
	// llmgw dev stops every engine when it stops, so after a restart there
	// is nothing running to wait for.
	s.Agents.Settle = time.Second
	s.Models = []spec.Model{
		{
			Name: ModelChat, Aliases: []string{"chat"}, Source: "sim://chat", ContextLength: 8192, MaxOutput: 1024,
			Scaling: spec.Scaling{Min: 1, Max: 2},
			Profiles: []spec.Profile{{
				Name: "h100", Engine: "sim", GPUClass: "h100-80g", TP: 1, StartupTimeout: spec.Duration(time.Minute),
				Args: []string{"--prefill-tps", "20000", "--decode-tps", "200", "--eos-after", "16"},
			}},
		},
		{
			Name: Model2Node, Source: "sim://2node", ContextLength: 8192,
			Scaling: spec.Scaling{Min: 1, Max: 1},
			Profiles: []spec.Profile{{
				Name: "h100x2", Engine: "sim", GPUClass: "h100-80g", TP: 4, Nodes: 2, StartupTimeout: spec.Duration(time.Minute),
				Args: []string{"--prefill-tps", "20000", "--decode-tps", "100", "--eos-after", "16"},
			}},
		},
		{
			Name: ModelMirrored, Source: mirroredSource(base), ContextLength: 8192,
			Scaling: spec.Scaling{Min: 1, Max: 1},
			Profiles: []spec.Profile{{
				Name: "h100", Engine: "sim", GPUClass: "h100-80g", TP: 1, StartupTimeout: spec.Duration(time.Minute),
				Args: []string{"--prefill-tps", "20000", "--decode-tps", "200", "--eos-after", "16"},
			}},
		},
	}
	return s
}

// agentConfig is the configuration of node n, the i-th: the dev PKI, a
// hundred engine ports of its own, the simulated nvidia-smi and InfiniBand
// tree at smi and ibRoot, and its fabric if it has one.
func agentConfig(dir string, n node, base, i int, smi, ibRoot string) agentconfig.Agent {
	pkiDir := filepath.Join(dir, "pki")
	from := base + 100 + i*100
	a := agentconfig.Default()
	a.NodeID = n.id
	a.Server = "127.0.0.1:" + strconv.Itoa(base+2)
	a.TLS = agentconfig.TLS{CA: filepath.Join(pkiDir, "ca.pem"), Cert: filepath.Join(pkiDir, n.id+".pem"), Key: filepath.Join(pkiDir, n.id+"-key.pem")}
	a.Address = "127.0.0.1"
	a.StateDir = filepath.Join(dir, "nodes", n.id, "state")
	a.EnginePorts = agentconfig.PortRange{From: from, To: from + 99}
	a.Labels = map[string]string{"dev": "true"}
	a.Discovery = spec.Discovery{NvidiaSMI: smi, IBRoot: ibRoot}
	if n.fabric != "" {
		a.Fabrics = []spec.Fabric{{Name: n.fabric, Adapters: []string{"mlx5_0"}}}
		// Nodes of a fabric serve their weights to each other, on a port
		// the system picks (the hello tells the control plane which).
		a.PeerListen = "127.0.0.1:0"
	}
	return a
}

// writtenBy heads the files llmgw dev writes.
const writtenBy = "Written by llmgw dev on every start."

// prepareNode writes a node's simulated hardware and agent configuration.
func prepareNode(dir string, n node, base, i int) (string, error) {
	nd := filepath.Join(dir, "nodes", n.id)
	if err := os.MkdirAll(nd, 0o750); err != nil {
		return "", err
	}
	smi, err := simhw.WriteNvidiaSMI(nd, simhw.H100s(8, n.id))
	if err != nil {
		return "", fmt.Errorf("writing %s's nvidia-smi: %w", n.id, err)
	}
	ibRoot := filepath.Join(nd, "infiniband")
	if err := os.RemoveAll(ibRoot); err != nil {
		return "", err
	}
	if n.fabric != "" {
		if err := simhw.WriteInfiniBand(ibRoot, []simhw.SimAdapter{{Name: "mlx5_0", Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 200}}}}); err != nil {
			return "", fmt.Errorf("writing %s's InfiniBand tree: %w", n.id, err)
		}
	}
	path := filepath.Join(nd, "agent.yaml")
	return path, agentConfig(dir, n, base, i, smi, ibRoot).WriteFile(path, writtenBy)
}

// agentSet runs the agent child processes. It reaps each one that exits;
// one that exits before stop is logged ("agent exited", with its node and
// exit status) and started again after a delay that doubles from one second
// up to thirty with each exit in a row (an agent that ran for a minute
// starts the count again).
type agentSet struct {
	log    *slog.Logger
	binary string
	// stopped is closed by stop: nothing is started or restarted after it.
	stopped chan struct{}
	wg      sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	running  map[string]*exec.Cmd // node to its agent's current process
}

// restartDelay is the wait before restarting an agent that exited n times
// in a row.
func restartDelay(n int) time.Duration {
	return min(time.Second<<min(n-1, 5), 30*time.Second)
}

// start starts a node's agent and supervises it until stop.
func (a *agentSet) start(id, cfgPath, logPath string) error {
	cmd, err := a.launch(id, cfgPath, logPath)
	if err != nil {
		return err
	}
	a.wg.Add(1)
	go a.supervise(id, cfgPath, logPath, cmd)
	return nil
}

// launch starts one agent process, its output appended to logPath. It
// starts nothing once stop has begun.
func (a *agentSet) launch(id, cfgPath, logPath string) (*exec.Cmd, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopping {
		return nil, errors.New("the dev cluster is stopping")
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", logPath, err)
	}
	// The child has its own copy of the descriptor.
	defer lf.Close()
	cmd := exec.Command(a.binary, "agent", "-c", cfgPath, "--stop-engines-on-exit")
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the agent of %s: %w", id, err)
	}
	if a.running == nil {
		a.running = map[string]*exec.Cmd{}
	}
	a.running[id] = cmd
	return cmd, nil
}

// supervise waits for a node's agent (reaping it), and restarts it until
// stop.
func (a *agentSet) supervise(id, cfgPath, logPath string, cmd *exec.Cmd) {
	defer a.wg.Done()
	exits := 0
	for {
		started := time.Now()
		why := "exited"
		if err := cmd.Wait(); cmd.ProcessState != nil {
			why = cmd.ProcessState.String() // "exit status 1", "signal: killed"
		} else if err != nil {
			why = err.Error()
		}
		select {
		case <-a.stopped:
			a.log.Info("agent stopped", "node", id, "status", why)
			return
		default:
		}
		if time.Since(started) >= time.Minute {
			exits = 0
		}
		exits++
		for {
			wait := restartDelay(exits)
			a.log.Warn("agent exited", "node", id, "pid", cmd.Process.Pid, "status", why, "restart_in", wait.String())
			select {
			case <-a.stopped:
				return
			case <-time.After(wait):
			}
			next, err := a.launch(id, cfgPath, logPath)
			if err == nil {
				cmd = next
				a.log.Info("agent restarted", "node", id, "pid", cmd.Process.Pid)
				break
			}
			why, exits = "not restarted: "+err.Error(), exits+1
		}
	}
}

// stop terminates the agents (which stop their engines) and waits for
// them, killing any that outlives twenty seconds, then kills any engine an
// agent failed to stop, found through the supervisors' state files.
func (a *agentSet) stop(dir string) {
	a.mu.Lock()
	a.stopping = true
	close(a.stopped)
	running := make([]*exec.Cmd, 0, len(a.running))
	for _, c := range a.running {
		running = append(running, c)
	}
	a.mu.Unlock()
	for _, c := range running {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		for _, c := range running {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
		<-done
	}
	killLeftovers(dir, a.log)
}

// killLeftovers stops every engine an agent failed to stop: the
// supervisor's own recovery finds them from its state files (checking each
// pid is still the engine it launched) and stops them as it stops any shard,
// process group and sidecars included.
func killLeftovers(dir string, log *slog.Logger) {
	for _, n := range devNodes {
		sup := supervisor.New(log, filepath.Join(dir, "nodes", n.id, "state"))
		shards, err := sup.Recover()
		if err != nil {
			log.Warn("reading engine state", "node", n.id, "err", err)
		}
		if len(shards) == 0 {
			continue
		}
		log.Warn("stopping engines an agent left behind", "node", n.id, "engines", len(shards))
		if err := sup.StopAll(10 * time.Second); err != nil {
			log.Warn("stopping engines", "node", n.id, "err", err)
		}
	}
}

func waitServing(ctx context.Context, srv *server.Server, timeout time.Duration, srvDone <-chan error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		snap := srv.Router.Snapshot()
		serving := true
		for _, m := range demoModels {
			serving = serving && len(snap[m]) > 0
		}
		if serving {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-srvDone:
			return fmt.Errorf("control plane stopped: %w", err)
		case <-deadline.C:
			var why []string
			for _, m := range demoModels {
				if len(snap[m]) == 0 {
					e, _ := srv.Catalog.Get(m)
					why = append(why, m+": "+srv.Reconciler.LastFailure(m)+" "+srv.Reconciler.Explain(e.Model).String())
				}
			}
			return fmt.Errorf("demo models not serving after %s (see logs/): %s", timeout, strings.Join(why, "; "))
		case <-tick.C:
		}
	}
}

// writeFileAtomic writes path (0600) through a temporary file and a rename,
// so a reader never sees it half written.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
