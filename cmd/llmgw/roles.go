package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/llmgw/llmgw/agent"
	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/ctl"
	"github.com/llmgw/llmgw/devcluster"
	"github.com/llmgw/llmgw/internal/cliflags"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/server"
	"github.com/llmgw/llmgw/sim/simengine"
)

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func runServer(ctx context.Context, args []string) int {
	fs := cliflags.New("llmgw server", "llmgw server [-c server.yaml] [--log-level info]", os.Stderr)
	cfgPath := fs.String("c", "server.yaml", "configuration file")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := cliflags.ParseNoArgs(fs, args); err != nil {
		return cliflags.ExitCode(err)
	}
	log, err := newLogger(*level)
	if err != nil {
		return fail("server", err)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fail("server", err)
	}
	srv, err := server.New(ctx, cfg, version, log)
	if err != nil {
		return fail("server", err)
	}
	if err := srv.Run(ctx); err != nil {
		return fail("server", err)
	}
	return 0
}

func runAgent(ctx context.Context, args []string) int {
	fs := cliflags.New("llmgw agent", "llmgw agent [-c agent.yaml] [--log-level info] [--stop-engines-on-exit]", os.Stderr)
	cfgPath := fs.String("c", "agent.yaml", "configuration file")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	stopEngines := fs.Bool("stop-engines-on-exit", false, "stop every engine this agent started when it exits (engines otherwise outlive the agent)")
	if err := cliflags.ParseNoArgs(fs, args); err != nil {
		return cliflags.ExitCode(err)
	}
	log, err := newLogger(*level)
	if err != nil {
		return fail("agent", err)
	}
	cfg, err := agentconfig.Load(*cfgPath)
	if err != nil {
		return fail("agent", err)
	}
	a, err := agent.New(agent.Options{Config: cfg, Version: version, Logger: log})
	if err != nil {
		return fail("agent", err)
	}
	err = a.Run(ctx)
	if *stopEngines {
		a.StopAll(10 * time.Second)
	}
	if err != nil {
		return fail("agent", err)
	}
	return 0
}

func runSimEngine(ctx context.Context, args []string) int {
	cfg, err := simengine.ParseFlags(args, os.Stderr)
	if fe := (*simengine.FlagError)(nil); errors.As(err, &fe) {
		return cliflags.ExitCode(fe.Err)
	}
	if err != nil {
		return fail("sim-engine", err)
	}
	if cfg.ShowVersion {
		fmt.Println("llmgw sim-engine version " + version)
		return 0
	}
	log, _ := newLogger("info")
	if err := simengine.Run(ctx, cfg, log); err != nil {
		return fail("sim-engine", err)
	}
	return 0
}

func runCtl(ctx context.Context, args []string) int {
	return ctl.Run(ctx, args, os.Stdout, os.Stderr, os.Getenv)
}

func runDev(ctx context.Context, args []string) int {
	fs := cliflags.New("llmgw dev", "llmgw dev [--dir .llmgw-dev] [--port-base 8080] [--log-level info]", os.Stderr)
	dir := fs.String("dir", ".llmgw-dev", "directory for certificates, configuration, store and logs (reused)")
	base := fs.Int("port-base", 8080, "client API port; management +1, agents +2, metrics +3, pprof +4, the mirror's bytes +5 and management +6")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := cliflags.ParseNoArgs(fs, args); err != nil {
		return cliflags.ExitCode(err)
	}
	log, err := newLogger(*level)
	if err != nil {
		return fail("dev", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail("dev", fmt.Errorf("finding the llmgw executable: %w", err))
	}
	if err := devcluster.Run(ctx, devcluster.Options{Dir: *dir, PortBase: *base, Binary: exe, Version: version, Out: os.Stdout, Logger: log}); err != nil {
		return fail("dev", err)
	}
	return 0
}
