terraform {
  required_version = ">= 1.9"

  required_providers {
    llmgw = {
      source = "llmgw/llmgw"
    }
  }
}
