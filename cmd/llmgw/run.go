package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/runtime/hostadmin"
)

// version is the version the binary was built as (internal/buildinfo,
// stamped by make build and make release).
var version = buildinfo.Version()

func run(args []string) int {
	if len(args) == 0 {
		usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "version", "--version":
		fmt.Println(buildinfo.String("llmgw"))
		return 0
	case "help", "-h", "--help":
		usage()
		return 0
	case "server":
		return runServer(ctx, args[1:])
	case "agent":
		return runAgent(ctx, args[1:])
	case "sim-engine":
		return runSimEngine(ctx, args[1:])
	case "ctl":
		return runCtl(ctx, args[1:])
	case "keys":
		return hostadmin.Keys(ctx, args[1:], hostadmin.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	case "users":
		return hostadmin.Users(ctx, args[1:], hostadmin.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	case "dev":
		return runDev(ctx, args[1:])
	case "mirror":
		return runMirror(ctx, args[1:])
	}
	fmt.Fprintf(os.Stderr, "llmgw: unknown command %q\n", args[0])
	usage()
	return 2
}

// fail prints err as the command's error and returns exit code 1.
func fail(cmd string, err error) int {
	fmt.Fprintf(os.Stderr, "llmgw %s: %v\n", cmd, err)
	return 1
}
