// Package e2e starts llmgw as separate processes — control plane, agents,
// sim engines — over real mutual TLS, and checks the whole path with the
// official OpenAI Go client. The process harness is testkit/testcluster.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/llmgw/llmgw/testkit/pgtest"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "llmgw-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, err = testcluster.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A PostgreSQL server is started only if a test asks for a database.
	code := pgtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}
