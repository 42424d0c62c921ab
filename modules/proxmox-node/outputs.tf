output "node_id" {
  description = "The node id: the VM's name, its hostname and its certificate's common name."
  value       = llmgw_node.this.name
}

output "vmid" {
  description = "The VM's id."
  value       = llmgw_proxmox_vm.this.vmid
}

output "vm_id" {
  description = "Where the VM is, `NODE/VMID` (its import id)."
  value       = llmgw_proxmox_vm.this.id
}

output "address" {
  description = "The node's address (the host part of `address`)."
  value       = llmgw_node.this.address
}

output "status" {
  description = "The node's state when apply finished: `ready` after a successful apply."
  value       = llmgw_node.this.state
}

output "reason" {
  description = "Why the node is not ready, or its warnings (a CPU without AVX2, say); empty when there is nothing to say."
  value       = llmgw_node.this.reason
}

output "cloud_init_iso_removed" {
  description = "Whether the cloud-init ISO, which holds the node's private key, has been deleted from Proxmox."
  value       = llmgw_proxmox_vm.this.cloud_init_iso_removed
}
