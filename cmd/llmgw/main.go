// Command llmgw is the one llmgw binary: control plane, node agent, operator
// CLI, weights mirror, simulated engine and the one-machine development cluster.
package main

import (
	"fmt"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: llmgw <command> [flags]

commands:
  server      run the control plane (-c server.yaml)
  agent       run the node agent (-c agent.yaml)
  mirror      serve a weights directory (mirror serve) and fill it (mirror fetch)
  ctl         operator CLI over the management API, and certificate tools
  keys        create and list API keys on the control-plane host
  users       create users and make them administrators on the control-plane host
  sim-engine  run the simulated OpenAI-compatible engine
  dev         run a whole cluster on this machine
  version     print the version`)
}
