terraform {
  required_providers {
    llmgw = {
      source = "llmgw/llmgw"
    }
  }
}

# With LLMGW_ENDPOINT, LLMGW_TOKEN and LLMGW_CA_CERT set (as `llmgw dev`
# prints them), an empty block is enough:
#
#   provider "llmgw" {}

provider "llmgw" {
  endpoint     = "cp.example.internal:9090"
  token        = var.llmgw_token
  ca_cert_file = "/etc/llmgw/pki/ca.pem"

  # The CA that signs node identities on this machine; the key is read only
  # when a certificate is signed and never stored in state.
  pki = {
    ca_cert_file = "/etc/llmgw/pki/ca.pem"
    ca_key_file  = "/etc/llmgw/pki/ca-key.pem"
  }
}

variable "llmgw_token" {
  type      = string
  sensitive = true
}
