# Three GPU nodes as Proxmox VMs on two InfiniBand fabrics: gpu-141 and
# gpu-142 share ib-a (so a model can span both), gpu-143 is alone on ib-b.
# One module call per node, the name stated once. See README.md.

# The control plane (LLMGW_ENDPOINT, LLMGW_TOKEN, LLMGW_CA_CERT), the CA that
# signs node certificates (LLMGW_CA_CERT, LLMGW_CA_KEY) and Proxmox
# (PROXMOX_VE_ENDPOINT, PROXMOX_VE_API_TOKEN) come from the environment.
provider "llmgw" {}

locals {
  nodes = {
    "gpu-141" = { target_node = "pve1", address = "10.0.0.141/24", fabric = "ib-a", rack = "r1" }
    "gpu-142" = { target_node = "pve1", address = "10.0.0.142/24", fabric = "ib-a", rack = "r1" }
    "gpu-143" = { target_node = "pve2", address = "10.0.0.143/24", fabric = "ib-b", rack = "r2" }
  }
}

resource "llmgw_fabric" "this" {
  for_each = toset([for n in local.nodes : n.fabric])

  name        = each.key
  description = "HDR InfiniBand (${join(", ", sort([for name, n in local.nodes : name if n.fabric == each.key]))})"
}

module "node" {
  source   = "../../modules/proxmox-node"
  for_each = local.nodes

  name          = each.key
  control_plane = var.control_plane
  llmgw_binary  = var.llmgw_binary

  target_node = each.value.target_node
  clone_from  = var.clone_from
  address     = each.value.address
  gateway     = "10.0.0.1"
  nameservers = ["10.0.0.1"]
  storage     = "local-lvm"
  ssh_keys    = var.ssh_keys
  cores       = 32
  memory_mb   = 262144
  disk_gb     = 500

  # The GPUs and the InfiniBand adapter are passed through to the VM by the
  # template (hostpci); the node finds them with nvidia-smi and sysfs.
  fabric = { name = llmgw_fabric.this[each.value.fabric].name, adapters = ["mlx5_0"] }
  engines = {
    vllm     = "/opt/venvs/vllm/bin/vllm"
    llamacpp = "/opt/llama.cpp/llama-server"
  }
  # llama-server needs it; without it the engine check fails apply with
  # "llama-server cannot start: libgomp.so.1: …".
  packages   = ["libgomp1"]
  labels     = { rack = each.value.rack }
  model_dirs = ["/var/lib/llmgw-models"]

  registration_timeout = "15m"
}
