# The identity of node gpu-07, signed with the provider's pki CA. The agent
# uses cert_pem, private_key_pem and ca_cert_pem as its tls.cert, tls.key and
# tls.ca; a plan made in the last 30 days of the year proposes a new one.
resource "llmgw_node_certificate" "gpu07" {
  node_name           = "gpu-07"
  validity_hours      = 8760
  early_renewal_hours = 720
}

output "gpu07_cert" {
  value = llmgw_node_certificate.gpu07.cert_pem
}
