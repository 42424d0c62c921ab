# One llmgw node as a Proxmox VM, the name stated once: the node's
# certificate, its VM (cloned with cpu = host and booted with cloud-init
# user-data that installs and starts the agent), and its declaration, which
# waits until the node is ready or fails with the node's reason.
#
# The VM and the declaration do not depend on each other, so Terraform
# creates them side by side: the declaration exists before the agent first
# connects (a control plane with agents.require_declared refuses an
# undeclared node), the VM's apply waits for the node to register and then
# deletes the cloud-init ISO, and llmgw_node's apply waits for it to be
# ready with its engines checked.

locals {
  # Where the user-data puts things on the VM. The unit (files/, a copy of
  # examples/deploy/systemd/llmgw-agent.service) runs
  # `/usr/local/bin/llmgw agent -c /etc/llmgw/agent.yaml`.
  binary_path    = "/usr/local/bin/llmgw"
  install_script = "/usr/local/lib/llmgw/install-llmgw"
  config_path    = "/etc/llmgw/agent.yaml"
  ca_path        = "/etc/llmgw/ca.pem"
  cert_path      = "/etc/llmgw/${var.name}.pem"
  key_path       = "/etc/llmgw/${var.name}-key.pem"
  unit_path      = "/etc/systemd/system/llmgw-agent.service"

  ip = split("/", var.address)[0]

  discovery = var.discovery == null ? tomap({}) : { for k, v in var.discovery : k => v if v != null }

  agent_yaml = templatefile("${path.module}/agent.yaml.tftpl", {
    name        = var.name
    server      = var.control_plane
    server_name = var.control_plane_server_name
    ca_path     = local.ca_path
    cert_path   = local.cert_path
    key_path    = local.key_path
    address     = local.ip
    fabric      = var.fabric
    engines     = var.engines
    labels      = var.labels
    model_dirs  = var.model_dirs
    discovery   = local.discovery
  })

  # The user-data carries the node's private key, from the ephemeral
  # llmgw_node_certificate: it is ephemeral too, reaches the VM through the
  # write-only user_data_wo, and is never in the plan or the state.
  user_data = templatefile("${path.module}/user-data.yaml.tftpl", {
    name           = var.name
    packages       = var.packages
    binary         = var.llmgw_binary
    binary_path    = local.binary_path
    install_script = local.install_script
    files = [
      { path = local.install_script, mode = "0755", content = file("${path.module}/files/install-llmgw") },
      { path = local.ca_path, mode = "0644", content = ephemeral.llmgw_node_certificate.this.ca_cert_pem },
      { path = local.cert_path, mode = "0644", content = ephemeral.llmgw_node_certificate.this.cert_pem },
      { path = local.key_path, mode = "0600", content = ephemeral.llmgw_node_certificate.this.private_key_pem },
      { path = local.config_path, mode = "0644", content = local.agent_yaml },
      { path = local.unit_path, mode = "0644", content = file("${path.module}/files/llmgw-agent.service") },
    ]
  })

  # What the user-data is made of, the certificate aside: Terraform never
  # sees user_data_wo again, so a change to any of these (or a new
  # certificate_generation) replaces the VM through user_data_wo_version.
  user_data_version = sha256(jsonencode({
    certificate_generation = var.certificate_generation
    agent_yaml             = local.agent_yaml
    packages               = var.packages
    binary                 = var.llmgw_binary
    install_script         = file("${path.module}/files/install-llmgw")
    unit                   = file("${path.module}/files/llmgw-agent.service")
    template               = file("${path.module}/user-data.yaml.tftpl")
  }))
}

# The node's identity, signed afresh on every run and never stored: its
# certificate's common name is the node id. Only the run that creates the
# VM hands it over; the key then exists only on the node.
ephemeral "llmgw_node_certificate" "this" {
  node_name      = var.name
  validity_hours = var.certificate_validity_hours
}

resource "llmgw_proxmox_vm" "this" {
  name        = var.name
  target_node = var.target_node
  vmid        = var.vmid
  clone_from  = var.clone_from
  cpu_type    = var.cpu_type
  cores       = var.cores
  memory_mb   = var.memory_mb
  disk_gb     = var.disk_gb
  storage     = var.storage
  iso_storage = var.iso_storage
  bridge      = var.bridge
  address     = var.address
  gateway     = var.gateway
  ssh_keys    = length(var.ssh_keys) > 0 ? var.ssh_keys : null

  nameservers    = length(var.nameservers) > 0 ? var.nameservers : null
  search_domains = length(var.search_domains) > 0 ? var.search_domains : null

  user_data_wo         = local.user_data
  user_data_wo_version = local.user_data_version

  wait_for_registration = true
  registration_timeout  = var.registration_timeout
  # Destroy drains the node before the VM stops, as long as llmgw_node's
  # own drain may take.
  drain_timeout = var.ready_timeout
}

resource "llmgw_node" "this" {
  name       = var.name
  address    = local.ip
  fabric     = var.fabric
  engines    = length(var.engines) > 0 ? var.engines : null
  labels     = length(var.labels) > 0 ? var.labels : null
  model_dirs = length(var.model_dirs) > 0 ? var.model_dirs : null
  discovery  = length(local.discovery) > 0 ? var.discovery : null

  wait_for_ready = true
  ready_timeout  = var.ready_timeout
}
