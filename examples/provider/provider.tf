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

  # Only for llmgw_proxmox_vm; PROXMOX_VE_ENDPOINT and PROXMOX_VE_API_TOKEN
  # work too (see docs/proxmox.md).
  proxmox = {
    endpoint         = "https://pve1.example.internal:8006/api2/json"
    api_token_id     = "terraform@pve!llmgw"
    api_token_secret = var.pve_token_secret
    ca_file          = "/etc/llmgw/pve-root-ca.pem"
  }
}

variable "llmgw_token" {
  type      = string
  sensitive = true
}

variable "pve_token_secret" {
  type      = string
  sensitive = true
}
