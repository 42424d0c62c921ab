package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/testkit/pgtest"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestControlPlaneOnPostgres runs the control plane on a real PostgreSQL:
// keys created with `llmgw keys` authenticate, usage rows land there, and
// both survive a restart.
func TestControlPlaneOnPostgres(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	c := testcluster.NewCluster(t, binary, testcluster.Options{Grace: "10s", Models: pricedModel, Store: dsn})
	c.StartAgent(testcluster.NodeSpec{ID: "node01"})
	tc := &tenancyCluster{Cluster: c, t: t}
	tc.waitServing()

	st, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	body := fmt.Sprintf(chatBody, 5)
	for i := range 3 {
		if r := tc.post(context.Background(), c.APIKey, fmt.Sprintf("pg-%d", i), body); r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	rows := tc.rows(st, store.DefaultProject, 3)
	if rows[0].Model != "sim-priced" || rows[0].Cost <= 0 || rows[0].CompletionTokens == 0 {
		t.Errorf("usage row on PostgreSQL = %+v", rows[0])
	}

	c.StopServer()
	c.StartServer()
	tc.waitServing()
	testcluster.WaitFor(t, "a request after the restart", 30*time.Second, func() (bool, string) {
		r := tc.post(context.Background(), c.APIKey, "pg-after", body)
		return r.status == http.StatusOK, fmt.Sprintf("%d %s", r.status, r.body)
	})
	tc.rows(st, store.DefaultProject, 4)
}
