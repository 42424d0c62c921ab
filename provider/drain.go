package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// drainRefusalGrace is how long a destroy asks again when the control
// plane refuses a drain because a replica cannot move: a model destroyed in
// the same run, in parallel, may be leaving the catalog. Then it fails.
const drainRefusalGrace = 5 * time.Second

// startDrain asks the control plane to drain node name. gone reports a
// node the control plane does not know (nothing to drain). A drain that
// cannot finish, because no other node can take one of its replicas, is
// refused by the control plane; it is asked again for drainRefusalGrace
// and then fails with the control plane's reason (each such replica and
// why), followed by hint, what the operator can do.
func startDrain(ctx context.Context, c *Client, name, doing, hint string) (gone bool, diags diag.Diagnostics) {
	deadline := time.Now().Add(drainRefusalGrace)
	for {
		_, err := c.DrainNode(ctx, name)
		switch {
		case err == nil:
			return false, nil
		case IsNotFound(err):
			return true, nil
		case status.Code(err) != codes.FailedPrecondition:
			diags.Append(c.Diag(doing, err))
			return false, diags
		case time.Now().After(deadline):
			diags.AddError(fmt.Sprintf("Node %s cannot be drained", name),
				fmt.Sprintf("%s: %s.\n\nNothing was stopped and the node keeps serving. %s", doing, status.Convert(err).Message(), hint))
			return false, diags
		}
		select {
		case <-ctx.Done():
			diags.AddError(fmt.Sprintf("Interrupted while draining node %s", name), ctx.Err().Error())
			return false, diags
		case <-time.After(nodePollInterval):
		}
	}
}

// drainBlockedError is the error of a drain that started but can no longer
// finish: the control plane's drain_blocked, each replica that cannot move
// and why.
func drainBlockedError(name, blocked, hint string) diag.Diagnostic {
	return diag.NewErrorDiagnostic(fmt.Sprintf("Node %s cannot finish draining", name),
		fmt.Sprintf("No other node can take what node %s still runs:\n\n  %s\n\nThe node stays draining; `llmgw ctl drain %s --cancel` puts it back in service. %s",
			name, strings.ReplaceAll(blocked, "\n", "\n  "), name, hint))
}

// nodeDrainHint is what to do when llmgw_node's destroy cannot drain.
const nodeDrainHint = "Make room on other nodes or add one, destroy or change the model first, " +
	"or set drain_on_destroy = false to stop the node's replicas with it (for a fleet torn down as a whole), and destroy again."

// vmDrainHint is what to do when llmgw_proxmox_vm's destroy cannot drain.
const vmDrainHint = "Make room on other nodes or add one, destroy or change the model first, " +
	"or set drain_timeout = \"0s\" to stop the VM without draining, and destroy again."

// drainOnDestroySchema is llmgw_node's drain_on_destroy.
func drainOnDestroySchema() schema.BoolAttribute {
	return schema.BoolAttribute{
		Optional: true, Computed: true, Default: booldefault.StaticBool(true),
		MarkdownDescription: "Whether destroy first moves the node's replicas to other nodes, each replacement ready before the original stops (default true). " +
			"A drain that cannot finish (no other node can hold a replica) fails the destroy at once naming the replica and why; a replica of a model destroyed in the same run is not moved. " +
			"`false` skips the drain: the replicas stop with the node (and are placed again elsewhere if a node can hold them). " +
			"Set it when a fleet is torn down as a whole, where there is nowhere to move them, as the quickstart's `llmgw dev` nodes do.",
	}
}

// drainOnDestroy is the state's drain_on_destroy; true when unset (state
// from before the attribute).
func drainOnDestroy(m nodeResourceModel) bool {
	return m.DrainOnDestroy.IsNull() || m.DrainOnDestroy.IsUnknown() || m.DrainOnDestroy.ValueBool()
}
