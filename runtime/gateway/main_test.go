package gateway

import (
	"os"
	"testing"

	"github.com/llmgw/llmgw/testkit/pgtest"
)

// TestMain stops the PostgreSQL server the thread tests share
// (pgtest.NewDatabase starts it on first use only).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
