package storetest

import (
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// testControlPlaneDemand: one record per control plane name, replaced by
// every write (a restarted process under the name too), aged by the
// database's clock, and removed only by the instance that wrote it, or
// by PruneDemand once older than its bound.
func testControlPlaneDemand(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got, err := s.ListDemand(ctx); err != nil || len(got) != 0 {
		t.Fatalf("demand on a new store = %+v, %v; want none", got, err)
	}
	if err := s.PutDemand(ctx, "", "i1", "{}"); err == nil {
		t.Fatal("PutDemand without a name succeeded")
	}
	if err := s.PutDemand(ctx, "cp-b", "b1", `{"models":{"m":{}}}`); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDemand(ctx, "cp-a", "a1", `{}`); err != nil {
		t.Fatal(err)
	}
	if err := s.PutDemand(ctx, "cp-b", "b2", `{"models":{"n":{}}}`); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListDemand(ctx)
	if err != nil || len(got) != 2 || got[0].Name != "cp-a" || got[1].Name != "cp-b" || got[1].Instance != "b2" || got[1].Value != `{"models":{"n":{}}}` {
		t.Fatalf("demand = %+v, %v; want cp-a and cp-b's latest record", got, err)
	}
	first := got[1]
	if first.UpdatedAt.IsZero() || first.Age < 0 || first.Age > time.Minute {
		t.Fatalf("record %+v: want a database time and a small age", first)
	}
	// The age grows with the database's clock.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err = s.ListDemand(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got[1].Age >= first.Age+50*time.Millisecond && got[1].UpdatedAt.Equal(first.UpdatedAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the age of an unchanged record stayed %s (read %+v)", first.Age, got[1])
		}
		time.Sleep(20 * time.Millisecond) // polling the database's clock
	}
	// Only the instance that wrote the record removes it.
	if err := s.DeleteDemand(ctx, "cp-b", "b1"); err != nil {
		t.Fatal(err)
	}
	if got, err = s.ListDemand(ctx); err != nil || len(got) != 2 {
		t.Fatalf("after a delete by an older instance: %+v, %v; want both records", got, err)
	}
	if err := s.DeleteDemand(ctx, "cp-b", "b2"); err != nil {
		t.Fatal(err)
	}
	if got, err = s.ListDemand(ctx); err != nil || len(got) != 1 || got[0].Name != "cp-a" {
		t.Fatalf("after cp-b's delete: %+v, %v; want cp-a's alone", got, err)
	}

	// PruneDemand removes what is older than its bound, and nothing else.
	if _, err := s.PruneDemand(ctx, 0); err == nil {
		t.Error("PruneDemand with no age succeeded")
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		if got, err = s.ListDemand(ctx); err != nil {
			t.Fatal(err)
		}
		if got[0].Age >= 300*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cp-a's record did not age: %+v", got)
		}
		time.Sleep(20 * time.Millisecond) // polling the database's clock
	}
	if err := s.PutDemand(ctx, "cp-c", "c1", `{}`); err != nil {
		t.Fatal(err)
	}
	if got, err = s.ListDemand(ctx); err != nil || len(got) != 2 {
		t.Fatalf("demand = %+v, %v; want cp-a and cp-c", got, err)
	}
	bound := (got[0].Age + got[1].Age) / 2
	if n, err := s.PruneDemand(ctx, bound); err != nil || n != 1 {
		t.Fatalf("PruneDemand(%s) with records %s and %s old = %d, %v; want the older removed", bound, got[0].Age, got[1].Age, n, err)
	}
	if got, err = s.ListDemand(ctx); err != nil || len(got) != 1 || got[0].Name != "cp-c" {
		t.Fatalf("after pruning: %+v, %v; want cp-c's alone", got, err)
	}
}
