package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

// A field's role says whether changing it restarts a running replica. Every
// field of Model and Profile is classified in modelRoles or profileRoles,
// declared in model.go under each type (TestEveryFieldHasARole fails for a
// field that is not), so a new field cannot roll replicas, or fail to, by
// accident.
type fieldRole int

const (
	// roleBuild: the replica's engine process is built from it (its
	// command line, environment, weights, world size). A change makes the
	// running replicas stale: they are rolled (or, with rollout manual,
	// marked stale).
	roleBuild fieldRole = iota + 1
	// rolePlacement: checked when a replica is placed, never again. A
	// change steers the replicas placed from then on; a running replica
	// keeps its node and GPUs.
	rolePlacement
	// roleServing: read live by the gateway, the router or the reconciler
	// (routing, limits, pricing, replica count). A change takes effect on
	// running replicas without restarting them.
	roleServing
	// roleStart: given to a replica's agents when it is placed, to
	// supervise its start. A change applies to replicas placed from then
	// on; a running one keeps what its agents were given.
	roleStart
	// roleOwnProfile: Model.Profiles. A replica is built from its own
	// profile only: adding, removing or editing another profile leaves it
	// alone.
	roleOwnProfile
)

// ReplicaGeneration hashes what a replica placed with profile is built
// from: m's build fields (name, source, context length) and that profile's
// own (name, engine, tp, nodes, args, env, launch mode). A running replica
// stamped with another value is stale. Fields left at their zero value are
// not hashed, so classifying a new field as build keeps every existing
// replica's generation. "" when m has no profile of that name: no replica
// of it is current.
func ReplicaGeneration(m Model, profile string) string {
	i := slices.IndexFunc(m.Profiles, func(p Profile) bool { return p.Name == profile })
	if i < 0 {
		return ""
	}
	b, _ := json.Marshal(struct {
		Model   map[string]any
		Profile map[string]any
	}{buildFields(m, modelRoles), buildFields(m.Profiles[i], profileRoles)})
	return shortHash(b)
}

// Stale reports whether a replica placed with profile and stamped with
// generation is built otherwise than m asks: its own profile's build fields,
// or the model's, changed since, or m has no such profile. Edits to other
// profiles and to fields no replica is built from leave it current, and so
// does LegacyGeneration(m): the replica was placed, by a release whose
// generations were per model, for exactly this definition. It is the one
// rule of staleness: the control plane's catalog (StaleStamp over hashes it
// keeps) and the provider's plan (over the definition before and after a
// change) both ask it.
func Stale(m Model, profile, generation string) bool {
	return StaleStamp(ReplicaGeneration(m, profile), LegacyGeneration(m), generation)
}

// StaleStamp is Stale given ReplicaGeneration(m, profile) as current ("" when
// m has no such profile) and LegacyGeneration(m) as legacy: for a caller
// that keeps those hashes rather than hashing m for each replica.
func StaleStamp(current, legacy, generation string) bool {
	return current == "" || (generation != current && generation != legacy)
}

// ReplicaGenerations is ReplicaGeneration of each of m's profiles, by name.
func ReplicaGenerations(m Model) map[string]string {
	out := make(map[string]string, len(m.Profiles))
	for _, p := range m.Profiles {
		out[p.Name] = ReplicaGeneration(m, p.Name)
	}
	return out
}

// Generation is the model's generation: a hash of every profile's replica
// generation. It changes when a profile is added or removed or any
// profile's replicas would be rebuilt, and never for a field no replica is
// built from (aliases, pricing, scaling, max_output, a profile's weight,
// priority or placement constraints). Which running replicas roll is
// decided per replica, by ReplicaGeneration.
func Generation(m Model) string {
	gens := ReplicaGenerations(m)
	names := make([]string, 0, len(gens))
	for name := range gens {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString(m.Name)
	for _, name := range names {
		b.WriteString("\x00" + name + "=" + gens[name])
	}
	return shortHash([]byte(b.String()))
}

// RolledProfiles names the profiles of a whose running replicas changing a
// into b rolls: those whose build fields (or the model's) changed, and
// those b no longer has. Empty when the change restarts nothing.
func RolledProfiles(a, b Model) []string {
	var out []string
	for _, p := range a.Profiles {
		if ReplicaGeneration(a, p.Name) != ReplicaGeneration(b, p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
}

// FollowProfile returns running, a replica's profile as it was placed, with
// every serving and placement field taken from catalog, the catalog's
// current profile of the same name: a running replica follows an edit of
// its weight, priority or placement constraints without restarting. Build
// and start fields stay as the replica was placed with them.
func FollowProfile(running, catalog Profile) Profile {
	out := running
	rv, cv := reflect.ValueOf(&out).Elem(), reflect.ValueOf(catalog)
	for i := range rv.NumField() {
		if r := profileRoles[rv.Type().Field(i).Name]; r == roleServing || r == rolePlacement {
			rv.Field(i).Set(cv.Field(i))
		}
	}
	return out
}

// LegacyGeneration is the generation replicas were stamped with before
// generations were per replica: a hash of the whole model less the
// profiles' weight and priority. A replica still carrying the legacy
// generation of the current definition is current (it was placed for
// exactly this definition), so upgrading the control plane rolls nothing.
func LegacyGeneration(m Model) string {
	profiles := make([]Profile, len(m.Profiles))
	for i, p := range m.Profiles {
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
	return shortHash(b)
}

// buildFields is v's build fields that are not zero (an empty list or map
// is zero), by their json name: the definition's own key, so that renaming
// a Go field does not roll replicas.
func buildFields(v any, roles map[string]fieldRole) map[string]any {
	rv := reflect.ValueOf(v)
	out := map[string]any{}
	for i := range rv.NumField() {
		f, sf := rv.Field(i), rv.Type().Field(i)
		if roles[sf.Name] != roleBuild || f.IsZero() {
			continue
		}
		if (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && f.Len() == 0 {
			continue
		}
		key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		out[key] = f.Interface()
	}
	return out
}

func shortHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
