package models

import (
	"testing"

	"github.com/llmgw/llmgw/spec"
)

// TestEntryStaleIsSpecStale: the catalog's Stale, from the hashes its
// entry keeps, answers as spec.Stale of the model for replicas stamped by
// this definition, by an earlier one of their own profile, by an earlier
// release (whole-model stamp) and for a profile the model no longer has.
func TestEntryStaleIsSpecStale(t *testing.T) {
	before := model("m")
	before.Normalize()
	after := before.Clone()
	after.Profiles[0].Args = []string{"--x"}
	after.Profiles = append(after.Profiles, spec.Profile{Name: "q", Engine: "sim", TP: 1})
	after.Normalize()
	stamps := []string{spec.ReplicaGeneration(before, "p"), spec.ReplicaGeneration(after, "p"), spec.ReplicaGeneration(after, "q"),
		spec.LegacyGeneration(before), spec.LegacyGeneration(after), ""}
	for _, m := range []spec.Model{before, after} {
		e := NewEntry(m, OriginAPI, 1)
		for _, profile := range []string{"p", "q", "gone"} {
			for _, g := range stamps {
				if got, want := e.Stale(profile, g), spec.Stale(m, profile, g); got != want {
					t.Errorf("model %s, profile %s, stamp %q: Entry.Stale %v, spec.Stale %v", spec.Generation(m), profile, g, got, want)
				}
			}
		}
	}
}
