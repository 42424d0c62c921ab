package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Generation hashes the parts of a model that its replicas are built from:
// name, source, context length and profiles. Replicas placed for another
// generation are rolled; a change that keeps the generation (aliases,
// pricing, scaling, max_output) never restarts a replica. The control plane
// stamps replicas with it and the Terraform provider plans with it, so both
// sides decide a rollout with the same rule.
func Generation(m Model) string {
	b, _ := json.Marshal(struct {
		Name          string
		Source        string
		ContextLength int
		Profiles      []Profile
	}{m.Name, m.Source, m.ContextLength, m.Profiles})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// SameReplicas reports whether replicas of a and b are built alike, so that
// changing a into b rolls none of them.
func SameReplicas(a, b Model) bool { return Generation(a) == Generation(b) }
