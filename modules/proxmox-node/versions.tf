terraform {
  # Ephemeral resources and write-only attributes (the node's key never in
  # state) need 1.11.
  required_version = ">= 1.11"

  required_providers {
    llmgw = {
      source = "llmgw/llmgw"
    }
  }
}
