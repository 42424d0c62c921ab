output "nodes" {
  description = "Node id => VM (NODE/VMID), address and state after apply."
  value = {
    for name, n in module.node : name => {
      vm      = n.vm_id
      address = n.address
      status  = n.status
    }
  }
}
