package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/provider/proxmox"
	pveapi "github.com/luthermonson/go-proxmox"
)

// llmgw_proxmox_vm and the node it runs: the registration Create and
// Update wait for before removing the seed ISO, and the drain Delete waits
// for before stopping the VM.

// sessionAfter reports whether n's agent has a session now that started
// after the session seen before the VM was started (after, Unix ms of the
// control plane's clock; 0 when none was seen). An entry of the machine
// the VM replaces, still ready or draining within its grace period, does
// not count: its session is the old one, or none.
func sessionAfter(n *managev1.Node, after int64) bool {
	return n != nil && n.GetConnected() && n.GetConnectedSinceUnixMs() > after
}

// sessionBefore is the start of node name's latest session as the control
// plane knows it now (0 when it knows none): read just before the VM
// starts, it is what the VM's own agent's session must be newer than.
func sessionBefore(ctx context.Context, c *Client, name string) (int64, error) {
	n, err := c.GetNode(ctx, name)
	if IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n.GetConnectedSinceUnixMs(), nil
}

// registrationTimedOut is the message of a node that did not register
// within timeout: what to look at, and what becomes of the ISO.
func registrationTimedOut(m *proxmoxVMModel, node string, timeout time.Duration, then string) (summary, detail string) {
	name, vmid := m.Name.ValueString(), m.VMID.ValueInt64()
	return fmt.Sprintf("Node %s did not register", name),
		fmt.Sprintf("VM %d (%s) is running, but no new agent session with the identity %s reached the control plane within %s. "+
			"Look at the VM's console or `cloud-init status --long` and the agent's journal (`journalctl -u llmgw-agent`). "+
			"The cloud-init ISO %s, which holds the node's private key, is still attached; %s "+
			"Raise registration_timeout for slow first boots, or set wait_for_registration = false.",
			vmid, node, name, timeout, m.CloudInitISO.ValueString(), then)
}

// removeSeedAfterRegistration waits until the node named m.Name has a
// session newer than after (sessionAfter), then detaches the cloud-init ISO
// and deletes it, recording that in m. It returns the node as last read;
// timedOut (with no diagnostics) when registration_timeout passed first,
// the ISO left attached.
func (r *proxmoxVMResource) removeSeedAfterRegistration(ctx context.Context, pve *proxmox.Client, m *proxmoxVMModel, after int64) (n *managev1.Node, timedOut bool, diags diag.Diagnostics) {
	name, vmid := m.Name.ValueString(), int(m.VMID.ValueInt64())
	node, _, _ := strings.Cut(m.ID.ValueString(), "/")
	volid := m.CloudInitISO.ValueString()
	deadline := time.Now().Add(m.registrationTimeout())
	tick := time.NewTicker(nodePollInterval)
	defer tick.Stop()
	for {
		var err error
		n, err = r.client.GetNode(ctx, name)
		if err == nil && sessionAfter(n, after) {
			break
		}
		if err != nil && !IsNotFound(err) {
			diags.Append(r.client.Diag("waiting for node "+name+" to register", err))
			return n, false, diags
		}
		if time.Now().After(deadline) {
			return n, true, diags
		}
		select {
		case <-ctx.Done():
			diags.AddError(fmt.Sprintf("Interrupted while waiting for node %s to register", name), ctx.Err().Error())
			return n, false, diags
		case <-tick.C:
		}
	}
	vm := pve.VM(node, vmid)
	task, err := vm.Config(ctx, pveapi.VirtualMachineOption{Name: proxmox.ISODevice, Value: "none,media=cdrom"})
	if err := pve.Wait(ctx, fmt.Sprintf("detaching %s from VM %d", volid, vmid), task, err); err != nil {
		diags.Append(pveDiag(pve, fmt.Sprintf("removing the cloud-init ISO of VM %d (%s)", vmid, name), err))
		return n, false, diags
	}
	if err := pve.DeleteVolume(ctx, node, volid); err != nil {
		diags.Append(pveDiag(pve, fmt.Sprintf("removing the cloud-init ISO of VM %d (%s)", vmid, name), err))
		return n, false, diags
	}
	m.CloudInitISO = types.StringValue("")
	m.CloudInitISORemoved = types.BoolValue(true)
	return n, false, diags
}

// registrationTimeout is registration_timeout, or its default.
func (m proxmoxVMModel) registrationTimeout() time.Duration {
	timeout, err := time.ParseDuration(m.RegistrationTimeout.ValueString())
	if err != nil {
		timeout, _ = time.ParseDuration(defaultRegistrationTimeout)
	}
	return timeout
}

// asWarnings is diags with every error made a warning.
func asWarnings(diags diag.Diagnostics) diag.Diagnostics {
	out := make(diag.Diagnostics, 0, len(diags))
	for _, d := range diags {
		if d.Severity() == diag.SeverityError {
			d = diag.NewWarningDiagnostic(d.Summary(), d.Detail()+"\n\nThe VM is kept; the next apply removes its cloud-init ISO again.")
		}
		out = append(out, d)
	}
	return out
}

// isoLeftWarning is the warning for a cloud-init ISO that could not be
// deleted: Proxmox's reason, and how to delete it by hand, since it holds
// the node's private key.
func isoLeftWarning(pve *proxmox.Client, node, volid, op string, err error) diag.Diagnostic {
	summary, detail := explainPVE(pve.Endpoint(), op, err)
	return diag.NewWarningDiagnostic("The cloud-init ISO "+volid+" is still on the hypervisor",
		fmt.Sprintf("%s: %s\n\n%s\n\nIt holds the node's private key: delete it by hand on %s with `pvesm free %s` "+
			"(the API token needs Datastore.Allocate on the storage to delete volumes).", summary, detail, node, node, volid))
}

// drainBeforeStop drains node name, which VM vmid runs, and waits until it
// holds no replica; a node the control plane does not know (never
// registered, or already removed by llmgw_node's destroy) has nothing to
// move. On timeout it names the replicas still on the node.
func drainBeforeStop(ctx context.Context, c *Client, name string, vmid int, timeout time.Duration) diag.Diagnostics {
	if gone, diags := startDrain(ctx, c, name, fmt.Sprintf("draining node %s before stopping VM %d", name, vmid), vmDrainHint); gone || diags.HasError() {
		return diags
	}
	n, diags := pollDrained(ctx, c, name, timeout, fmt.Sprintf("waiting for the drain of node %s before stopping VM %d", name, vmid), vmDrainHint)
	if n != nil {
		diags.AddError(fmt.Sprintf("Timed out draining node %s before stopping VM %d", name, vmid),
			fmt.Sprintf("After %s node %s still holds %s (their replacements are not ready elsewhere yet; `llmgw ctl explain-placement MODEL` says why). "+
				"VM %d was not stopped and the node stays draining.\n\n"+
				"Make room on other nodes or raise drain_timeout, and destroy again; `llmgw ctl drain %s --cancel` puts the node back in service.",
				timeout, name, remainingReplicas(ctx, c, name, n.GetReplicas()), vmid, name))
	}
	return diags
}

// remainingReplicas names the live replicas with a shard on node, like
// "replica sim-chat-1 of sim-chat (ready)"; count is what GetNode said,
// used when the list cannot be read.
func remainingReplicas(ctx context.Context, c *Client, node string, count int32) string {
	all, err := c.ListReplicas(ctx, "")
	if err != nil {
		return fmt.Sprintf("%d replicas", count)
	}
	var names []string
	for _, r := range all {
		if r.GetState() == "failed" || r.GetState() == "stopping" {
			continue
		}
		for _, sh := range r.GetShards() {
			if sh.GetNode() == node {
				names = append(names, fmt.Sprintf("replica %s of %s (%s)", r.GetId(), r.GetModel(), r.GetState()))
				break
			}
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("%d replicas", count)
	}
	return strings.Join(names, ", ")
}
