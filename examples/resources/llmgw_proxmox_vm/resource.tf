# gpu-142 as a VM on pve1: cloned from the cloud-image template, cpu = host
# (the default), VMID 142 from the address. Apply returns once the node has
# connected to the control plane and the cloud-init ISO, which carries the
# node's private key, has been deleted from the hypervisor.
resource "llmgw_proxmox_vm" "gpu142" {
  name        = llmgw_node_certificate.gpu142.node_name
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
  # key; modules/proxmox-node renders a complete one (docs/proxmox.md).
  user_data = templatefile("${path.module}/agent-user-data.yaml.tftpl", {
    name     = "gpu-142"
    cert_pem = llmgw_node_certificate.gpu142.cert_pem
    key_pem  = llmgw_node_certificate.gpu142.private_key_pem
    ca_pem   = llmgw_node_certificate.gpu142.ca_cert_pem
  })

  registration_timeout = "15m"
}
