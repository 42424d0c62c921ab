ephemeral "llmgw_node_certificate" "gpu142" {
  node_name = "gpu-142"
}

# gpu-142 as a VM on pve1: cloned from the cloud-image template, cpu = host
# (the default), VMID 142 from the address. Apply returns once the node has
# connected to the control plane and the cloud-init ISO, which carries the
# node's private key, has been deleted from the hypervisor.
resource "llmgw_proxmox_vm" "gpu142" {
  name        = "gpu-142"
  target_node = "pve1"
  clone_from  = "ubuntu-2404-cloud"

  cores     = 16
  memory_mb = 65536
  disk_gb   = 200
  storage   = "local-lvm"

  address = "10.0.0.142/24"
  gateway = "10.0.0.1"
  bridge  = "vmbr0"
  # A static address brings no DNS: without it apt and downloads fail.
  nameservers    = ["10.0.0.1"]
  search_domains = ["lab.example"]
  ssh_keys       = [file("~/.ssh/id_ed25519.pub")]

  # A template of your own that installs the agent with its certificate and
  # key; modules/proxmox-node renders a complete one (docs/proxmox.md). The
  # key comes from the ephemeral llmgw_node_certificate and goes through the
  # write-only user_data_wo: neither is ever in the plan or the state. Bump
  # user_data_wo_version to boot a new VM with a new certificate.
  user_data_wo = templatefile("${path.module}/agent-user-data.yaml.tftpl", {
    name     = "gpu-142"
    cert_pem = ephemeral.llmgw_node_certificate.gpu142.cert_pem
    key_pem  = ephemeral.llmgw_node_certificate.gpu142.private_key_pem
    ca_pem   = ephemeral.llmgw_node_certificate.gpu142.ca_cert_pem
  })
  user_data_wo_version = "1"

  registration_timeout = "15m"
}
