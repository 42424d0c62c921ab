package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Generation hashes the parts of a model that its replicas are built from:
// name, source, context length and profiles, less each profile's routing
// weight and priority. Replicas placed for another generation are rolled; a
// change that keeps the generation (aliases, pricing, scaling, max_output, a
// profile's weight or priority) never restarts a replica: a running
// replica's routing weight follows its profile in the catalog instead. The
// control plane stamps replicas with it and the Terraform provider plans
// with it, so both sides decide a rollout with the same rule.
func Generation(m Model) string {
	profiles := make([]Profile, len(m.Profiles))
	for i, p := range m.Profiles {
		// Hashed as the defaults, so that a profile with weight 1 and
		// priority 0 keeps the generation it had when these were hashed.
		p.Weight, p.Priority = DefaultWeight, 0
		profiles[i] = p
	}
	if m.Profiles == nil {
		profiles = nil
	}
	b, _ := json.Marshal(struct {
		Name          string
		Source        string
		ContextLength int
		Profiles      []Profile
	}{m.Name, m.Source, m.ContextLength, profiles})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// SameReplicas reports whether replicas of a and b are built alike, so that
// changing a into b rolls none of them.
func SameReplicas(a, b Model) bool { return Generation(a) == Generation(b) }
