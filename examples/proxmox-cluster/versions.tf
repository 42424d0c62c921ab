terraform {
  required_version = ">= 1.11"

  required_providers {
    llmgw = {
      source = "llmgw/llmgw"
    }
  }
}
