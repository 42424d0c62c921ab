package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

// rolloutPlanSchema is llmgw_model's rollout_plan.
func rolloutPlanSchema() schema.StringAttribute {
	return schema.StringAttribute{
		Computed: true,
		MarkdownDescription: "What the planned change does to running replicas, in words, set at plan time so that a reviewer reads it in the plan: " +
			"which running replicas are replaced or that none restarts, " +
			"and where the control plane's dry run expects each new replica to go (up to 16, in the order the control plane places them: " +
			"those scaling.min adds, then one replacement at a time, each placed while the replica it replaces still holds its GPUs; a prediction from the fleet at plan time). A running replica is replaced only when what its engine is built from changes: " +
			"the model's `name`, `source` or `context_length`, or its own profile's `name`, `engine`, `tp`, `nodes`, `args`, `env` or `launch_mode`. " +
			"Adding a profile, editing or removing another one, and `aliases`, `pricing`, `scaling`, `max_output`, `routing_profile` " +
			"and a profile's `weight`, `priority`, `startup_timeout`, `gpu_class`, `min_memory_gb`, `min_disk_gb` and `labels` restart nothing " +
			"(placement constraints steer new replicas only), " +
			"except for a replica still carrying the whole-model generation of an earlier release (under a control plane or agent of that release), which any change of a profile field but `weight` and `priority` replaces, adding or removing a profile included: the plan names it. " +
			"A replica already stale before the change (a manual rollout holds it) is named as such, not as replaced, and one whose profile the change sets back to what it was placed with is current again: the control plane judges staleness by the same rule. " +
			"Setting `rollout` from `manual` to `auto` releases the replicas the manual rollout held stale: the control plane replaces them, and the plan names them as replaced; " +
			"setting it from `auto` to `manual` restarts nothing, and the plan names the replicas already stale that it then holds. " +
			"A change that replaces running replicas is also a plan warning. " +
			"After apply it keeps what the last plan said.",
	}
}

// planRollout says in rollout_plan what the plan does to m's running
// replicas (old is the prior definition when priorKnown) and where new ones
// are expected (with dryRun, from the control plane's PlanPlacement, which
// it returns for the placement check to reuse; nil when it made none). A
// change that replaces running replicas is also a warning naming them.
func (r *modelResource) planRollout(ctx context.Context, resp *resource.ModifyPlanResponse, m, old spec.Model, priorKnown, dryRun bool) (*managev1.Explanation, error) {
	var ex *managev1.Explanation
	dry := func() error {
		if !dryRun {
			return nil
		}
		var err error
		ex, err = r.client.PlanPlacement(ctx, specpb.ModelToProto(m))
		return err
	}
	var text string
	switch {
	case !priorKnown:
		if m.Scaling.Min == 0 {
			text = "new model: no replica is placed until a request asks for it (scaling.min = 0)"
			break
		}
		if err := dry(); err != nil {
			return nil, err
		}
		text = fmt.Sprintf("new model: %s to place; %s", countNoun(m.Scaling.Min, "replica"), expectedWhere(ex, dryRun, "the first"))
	default:
		rolled := spec.RolledProfiles(old, m)
		legacyRolls := spec.LegacyGeneration(old) != spec.LegacyGeneration(m)
		policy := old.ManualRollout() != m.ManualRollout()
		var running, already []string
		var reps []*managev1.Replica
		anyLive, anyLegacy := false, false
		if len(rolled) > 0 || legacyRolls || policy {
			var err error
			if reps, err = r.client.ListReplicas(ctx, m.Name); err != nil {
				return nil, err
			}
			running, already, anyLive, anyLegacy = rolledReplicas(reps, old, m, rolled)
		}
		// A manual rollout switched to auto releases the replicas it held
		// stale: the control plane replaces them now, as it replaces those
		// the change makes stale.
		var released []string
		if old.ManualRollout() && !m.ManualRollout() {
			released, already = already, nil
		}
		if len(running)+len(released) > 0 {
			if err := dry(); err != nil {
				return nil, err
			}
			where := expectedWhere(ex, dryRun, "the first replacement")
			if len(already) > 0 {
				// Not this change's doing, but the plan names them still.
				where = alreadyStaleNote(m, already) + "; " + where
			}
			var summary, why string
			if m.ManualRollout() {
				text = manualRolloutText(m, running, where)
				summary, why = "will be stale", "changes what these replicas' engines are built from, and the model's rollout is manual"
			} else {
				text = replacesText(running, released, where)
				summary = "will be replaced"
				switch {
				case len(released) == 0:
					why = "changes what these replicas' engines are built from, so the control plane rolls them"
				case len(running) == 0:
					why = "releases the replicas the manual rollout held stale, so the control plane rolls them"
				default:
					why = "changes what some of these replicas' engines are built from and releases the others, which the manual rollout held stale, so the control plane rolls them all"
				}
			}
			why = "The planned change (" + plannedChange(old, m, rolled, len(running) > 0) + ") " + why + ": " + text + "."
			if anyLegacy {
				why += " Some were placed by a control plane of an earlier release and carry its whole-model generation, which any change but a profile's weight or priority replaces" +
					" (a control plane of this release restamps them with their own profile's generation at its first pass, after which only their own profile's build fields roll them)."
			}
			resp.Diagnostics.AddAttributeWarning(path.Root("rollout_plan"),
				fmt.Sprintf("Model %s: %s %s", m.Name, countNoun(len(running)+len(released), "running replica"), summary), why)
			break
		}
		text = "no running replica restarts (the change keeps what they are built from)"
		switch {
		case len(already) > 0 && policy:
			// policy is auto → manual here (manual → auto emptied
			// already): the rollout under way stops.
			text = fmt.Sprintf("no running replica restarts: rollout auto → manual holds %s already stale before this change (%s), serving the earlier definition until `llmgw ctl rollout %s` replaces them",
				countNoun(len(already), "running replica"), strings.Join(already, "; "), m.Name)
			if starting := startingCurrent(reps, old, m, rolled); len(starting) > 0 {
				verb, it := "are", "them"
				if len(starting) == 1 {
					verb, it = "is", "it"
				}
				// A replacement, or a replica scaling.min adds: either is
				// stopped as surplus once the others are enough.
				text += fmt.Sprintf("; %s not ready yet (%s) %s stopped when the model's replicas are enough without %s",
					countNoun(len(starting), "replica"), strings.Join(starting, "; "), verb, it)
			}
		case len(already) > 0:
			were := "were"
			if len(already) == 1 {
				were = "was"
			}
			text = fmt.Sprintf("no running replica restarts for this change (%s changes; %s %s already stale before it: %s)",
				rollingChange(old, m, rolled), countNoun(len(already), "running replica"), were, strings.Join(already, "; "))
		case len(rolled) > 0:
			text = fmt.Sprintf("no running replica restarts (%s changes, which no running replica uses)", rollingChange(old, m, rolled))
		}
		switch {
		case len(rolled) > 0 && !anyLive && m.Scaling.Min > 0:
			if err := dry(); err != nil {
				return nil, err
			}
			text += "; " + expectedWhere(ex, dryRun, "the first")
		case m.Scaling.Min > old.Scaling.Min:
			if err := dry(); err != nil {
				return nil, err
			}
			text += fmt.Sprintf("; scaling.min %d → %d adds %s; %s", old.Scaling.Min, m.Scaling.Min, countNoun(m.Scaling.Min-old.Scaling.Min, "replica"), expectedWhere(ex, dryRun, "the first new one"))
		case m.Scaling.Min < old.Scaling.Min:
			text += fmt.Sprintf("; scaling.min %d → %d stops the replicas above it", old.Scaling.Min, m.Scaling.Min)
		}
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("rollout_plan"), text)...)
	return ex, nil
}

// rolledReplicas names, among reps (the model's replicas), the live ones
// that changing old into m replaces ("r-1 on node01 (gpu 0)"): those
// current under old and stale under m, as staleUnder judges them. So a
// replica of a profile whose build fields changed is named, and so is one
// stamped with the whole-model generation of an earlier release (placed
// by, or still under, a control plane of that release, or not yet
// restamped) when that hash changes. A replica already stale under old (a
// manual rollout holds it, or a rollout is replacing it) is not this
// change's doing and is not named, nor is one the change makes current
// again (its profile set back to what it was placed with); those stale
// under both are named in already. anyLive says whether any replica is
// live; anyLegacy whether one of those replaced carries the earlier
// release's stamp. rolled is spec.RolledProfiles(old, m).
func rolledReplicas(reps []*managev1.Replica, old, m spec.Model, rolled []string) (running, already []string, anyLive, anyLegacy bool) {
	legacyOld := spec.LegacyGeneration(old)
	for _, rep := range reps {
		if st := rep.GetState(); st != "ready" && st != "starting" {
			continue
		}
		anyLive = true
		staleOld, staleNew := staleUnder(rep, old, m, rolled)
		if staleOld && staleNew {
			already = append(already, replicaWhere(rep))
		}
		if staleOld || !staleNew {
			continue
		}
		running = append(running, replicaWhere(rep))
		if replicaStamp(rep) == legacyOld {
			anyLegacy = true
		}
	}
	return running, already, anyLive, anyLegacy
}

// staleUnder says whether rep is stale under old, the definition before
// the change, and under m, the one after it (rolled is
// spec.RolledProfiles(old, m)). Before the change it is the control
// plane's verdict (Replica.stale) where it gives one, either way: the
// control plane judges by spec.Stale over the definition it holds, which
// old may not reproduce (a build field newer than this provider, drifted
// state); a control plane older than replica_generation gives none, and
// the provider judges by spec.Stale over the stamp the replica reports.
// After the change it is spec.Stale under m when the change alters what
// rep is built from (its profile is rolled, or the stamp's verdict moves
// between old and m); otherwise the change leaves the verdict before it
// standing. Where the two disagree the plan so names the replica the
// control plane will act on rather than staying silent about it.
func staleUnder(rep *managev1.Replica, old, m spec.Model, rolled []string) (staleOld, staleNew bool) {
	s := replicaStamp(rep)
	computedOld, computedNew := spec.Stale(old, rep.GetProfile(), s), spec.Stale(m, rep.GetProfile(), s)
	staleOld = computedOld
	if rep.GetReplicaGeneration() != "" { // a control plane that sets replica_generation sets stale too
		staleOld = rep.GetStale()
	}
	if computedOld != computedNew || slices.Contains(rolled, rep.GetProfile()) {
		return staleOld, computedNew
	}
	return staleOld, staleOld
}

// replicaStamp is the generation rep was stamped with: its replica_generation,
// or, from a control plane older than that field, its model_generation.
func replicaStamp(rep *managev1.Replica) string {
	if g := rep.GetReplicaGeneration(); g != "" {
		return g
	}
	return rep.GetModelGeneration()
}

// alreadyStaleNote names, beside a change that makes running replicas
// stale, those already stale before it (already, as rolledReplicas): a
// manual rollout holds them still, an auto one replaces them as it does
// the others.
func alreadyStaleNote(m spec.Model, already []string) string {
	one := len(already) == 1
	var verb string
	switch {
	case m.ManualRollout() && one:
		verb = "stays stale, held by the manual rollout"
	case m.ManualRollout():
		verb = "stay stale, held by the manual rollout"
	case one:
		verb = "is replaced by the rollout under way too"
	default:
		verb = "are replaced by the rollout under way too"
	}
	return fmt.Sprintf("%s already stale before this change (%s) %s", countNoun(len(already), "running replica"), strings.Join(already, "; "), verb)
}

// startingCurrent names among reps those starting and current under m
// (old being the definition before the change, rolled
// spec.RolledProfiles(old, m)), as staleUnder judges them: with a rollout
// under way, its replacement not ready yet, and any replica scaling.min
// adds that is not ready yet either.
func startingCurrent(reps []*managev1.Replica, old, m spec.Model, rolled []string) []string {
	var out []string
	for _, rep := range reps {
		if rep.GetState() != "starting" {
			continue
		}
		if _, stale := staleUnder(rep, old, m, rolled); !stale {
			out = append(out, replicaWhere(rep))
		}
	}
	return out
}

// replicaWhere is "r-1 on node01 (gpus 0,1)".
func replicaWhere(rep *managev1.Replica) string {
	var shards []string
	for _, sh := range rep.GetShards() {
		gpus := make([]string, len(sh.GetGpus()))
		for i, g := range sh.GetGpus() {
			gpus[i] = fmt.Sprint(g)
		}
		where := sh.GetNode()
		switch len(gpus) {
		case 0:
		case 1:
			where += " (gpu " + gpus[0] + ")"
		default:
			where += " (gpus " + strings.Join(gpus, ",") + ")"
		}
		shards = append(shards, where)
	}
	return rep.GetId() + " on " + strings.Join(shards, " + ")
}

// expectedWhere says where the control plane's dry run expects the
// replicas the change places, each in turn: "expected: profile h100,
// placed on node02 (gpu 1)" for a new one, "r-1's replacement with
// profile h100, placed on node01 (gpu 0)" for a replacement, the reason
// for one that does not place, and how many more were not dry-run. which
// ("the first replacement") names the first for a control plane that
// dry-runs one replica only.
func expectedWhere(ex *managev1.Explanation, dryRun bool, which string) string {
	if !dryRun {
		return "where " + which + " goes is not dry-run (placement_check = \"off\", or a value known only at apply)"
	}
	if len(ex.GetRollout()) == 0 {
		return expectedFirst(ex, which)
	}
	var parts []string
	for _, p := range ex.GetRollout() {
		who := "a new replica"
		if p.GetReplaces() != "" {
			who = p.GetReplaces() + "'s replacement"
		}
		switch {
		case !p.GetPlaced():
			parts = append(parts, fmt.Sprintf("%s: no node can hold it then (%s)", who, p.GetSummary()))
		case p.GetReplaces() == "":
			parts = append(parts, fmt.Sprintf("profile %s, %s", p.GetProfile(), p.GetSummary()))
		default:
			parts = append(parts, fmt.Sprintf("%s with profile %s, %s", who, p.GetProfile(), p.GetSummary()))
		}
	}
	if n := ex.GetRolloutMore(); n > 0 {
		parts = append(parts, strings.Replace(countNoun(int(n), "replica"), " ", " more ", 1)+" not dry-run")
	}
	return "expected: " + strings.Join(parts, "; ")
}

// expectedFirst says where the dry run put its one replica: "the first
// replacement is expected with profile h100, placed on node02 (gpu 1)".
func expectedFirst(ex *managev1.Explanation, which string) string {
	if ex == nil || !ex.GetPlaced() {
		return "no node can hold " + which + " now (the control plane's dry run placed none)"
	}
	for _, p := range ex.GetProfiles() {
		if p.GetPlaced() {
			return fmt.Sprintf("%s is expected with profile %s, %s", which, p.GetProfile(), p.GetSummary())
		}
	}
	return which + " is expected to place with profile " + ex.GetProfile()
}

// rollingChange names what changed among the fields replicas are built
// from, rolled being spec.RolledProfiles: "context_length 8192 → 16384",
// "profile h100", "profile cpu removed".
func rollingChange(old, m spec.Model, rolled []string) string {
	var parts []string
	if old.Name != m.Name {
		parts = append(parts, fmt.Sprintf("name %q → %q", old.Name, m.Name))
	}
	if old.Source != m.Source {
		parts = append(parts, fmt.Sprintf("source %q → %q", old.Source, m.Source))
	}
	if old.ContextLength != m.ContextLength {
		parts = append(parts, fmt.Sprintf("context_length %d → %d", old.ContextLength, m.ContextLength))
	}
	if len(parts) == 0 {
		for _, p := range rolled {
			if slices.ContainsFunc(m.Profiles, func(q spec.Profile) bool { return q.Name == p }) {
				parts = append(parts, "profile "+p)
			} else {
				parts = append(parts, "profile "+p+" removed")
			}
		}
	}
	if len(parts) == 0 {
		return "what the replicas are built from"
	}
	return strings.Join(parts, ", ")
}

// plannedChange names the planned change behind replacements: what the
// replicas are built from (when building, as rollingChange) and the
// rollout policy when it changes ("rollout manual → auto"). Its caller
// has one or the other: replicas the change makes stale (building), or
// ones a manual → auto change releases.
func plannedChange(old, m spec.Model, rolled []string, building bool) string {
	var parts []string
	if building {
		parts = append(parts, rollingChange(old, m, rolled))
	}
	if old.ManualRollout() != m.ManualRollout() {
		parts = append(parts, "rollout "+rolloutWord(old)+" → "+rolloutWord(m))
	}
	return strings.Join(parts, ", ")
}

// rolloutWord is m's rollout policy, "auto" when unset.
func rolloutWord(m spec.Model) string {
	if m.ManualRollout() {
		return spec.RolloutManual
	}
	return spec.RolloutAuto
}

// replacesText is rollout_plan for a change that has the control plane
// replace running replicas: running, which the change makes stale, and
// released, which a manual rollout held stale until the change set the
// rollout to auto. where is expectedWhere's.
func replacesText(running, released []string, where string) string {
	const each = "each replacement ready before the replica it replaces stops"
	switch {
	case len(released) == 0:
		return fmt.Sprintf("new generation: replaces %s (%s), %s; %s",
			countNoun(len(running), "running replica"), strings.Join(running, "; "), each, where)
	case len(running) == 0:
		return fmt.Sprintf("rollout manual → auto: replaces %s the manual rollout held stale (%s), %s; %s",
			countNoun(len(released), "running replica"), strings.Join(released, "; "), each, where)
	}
	return fmt.Sprintf("new generation, rollout manual → auto: replaces %s, %d this change makes stale (%s) and %d the manual rollout held stale (%s), %s; %s",
		countNoun(len(running)+len(released), "running replica"), len(running), strings.Join(running, "; "), len(released), strings.Join(released, "; "), each, where)
}

// countNoun is "1 replica", "2 replicas".
func countNoun(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// manualRolloutText is rollout_plan for a change that makes the running
// replicas of a model whose rollout is manual stale: they keep serving the
// earlier definition until an operator rolls them.
func manualRolloutText(m spec.Model, running []string, where string) string {
	keep := "keep"
	if len(running) == 1 {
		keep = "keeps"
	}
	return fmt.Sprintf("new generation: %s (%s) %s serving the earlier definition, stale, until `llmgw ctl rollout %s` replaces them one at a time, each replacement ready first (rollout = manual); %s",
		countNoun(len(running), "running replica"), strings.Join(running, "; "), keep, m.Name, where)
}
