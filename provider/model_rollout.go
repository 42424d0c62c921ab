package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

// stallBound is how long the control plane lets a needed replica find no
// node, with nothing freeing room, before it reports the rollout stalled
// (reconcile.DefaultStallAfter), in words.
const stallBound = "about 10 seconds"

// rolloutStalled is the error of a rollout that cannot make progress: the
// control plane could not place a replica of the new generation (or one of
// scaling.min) for stallBound, while older replicas keep serving; or it
// placed one that has been starting well past the slowest start of
// replicas built the same way on its nodes.
func rolloutStalled(name string, st *managev1.ModelStatus) diag.Diagnostic {
	if st.GetStalledReason() == "not_ready" {
		return diag.NewErrorDiagnostic(fmt.Sprintf("Rollout of model %s is not becoming ready", name),
			fmt.Sprintf("A replica of the new definition was placed but is not ready: %s.\n\n"+
				"The model stays in the catalog with the new definition, and the replicas already running keep serving; "+
				"the control plane lets the new replica go on starting until its profile's startup_timeout fails it. "+
				"Fix the profile (engine, args, env) or the node and apply again, or, if this start is only slower than the earlier ones, "+
				"set wait_for_rollout = false.", st.GetStalled()))
	}
	return diag.NewErrorDiagnostic(fmt.Sprintf("Rollout of model %s cannot make progress", name),
		fmt.Sprintf("The control plane cannot place what the new definition asks: %s.\n\n"+
			"The model stays in the catalog with the new definition, and the replicas already running keep serving until replacements can be placed. "+
			"Change the profiles or scaling back, or make room (free or add nodes), and apply again.", st.GetStalled()))
}

// unplacedApplyNote says what apply does with a definition no node can
// hold now: with wait_for_rollout, apply fails saying why (at once for a
// new model, after stallBound for a changed one whose old replicas keep
// serving); without, it returns once the model is stored.
func unplacedApplyNote(wait, exists bool) string {
	switch {
	case !wait:
		return "Apply will store the model and return (wait_for_rollout = false); the control plane places it when a node can hold it."
	case exists:
		return "Apply will store the new definition; the running replicas keep serving, and apply fails after " + stallBound +
			" naming why no node can hold the new one. The control plane keeps trying: it is placed when a node can hold it."
	}
	return "Apply will store the model and then fail naming why no node can hold it; the model stays in the catalog and is placed when a node can hold it."
}
