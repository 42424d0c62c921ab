# gpu-142's certificate and key, signed with the provider's pki CA on every
# run and never stored. Only the run that creates the VM hands them over,
# through the write-only user_data_wo; the key then exists only on the node.
ephemeral "llmgw_node_certificate" "gpu142" {
  node_name      = "gpu-142"
  validity_hours = 8760
}

resource "llmgw_proxmox_vm" "gpu142" {
  name        = "gpu-142"
  target_node = "pve1"
  clone_from  = "ubuntu-2404-cloud"
  address     = "10.0.0.142/24"
  nameservers = ["10.0.0.1"]

  user_data_wo = templatefile("${path.module}/agent-user-data.yaml.tftpl", {
    name     = "gpu-142"
    cert_pem = ephemeral.llmgw_node_certificate.gpu142.cert_pem
    key_pem  = ephemeral.llmgw_node_certificate.gpu142.private_key_pem
    ca_pem   = ephemeral.llmgw_node_certificate.gpu142.ca_cert_pem
  })
  # Change it to renew the certificate: the VM is replaced, booted with a
  # new one.
  user_data_wo_version = "1"
}
