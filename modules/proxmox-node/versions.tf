terraform {
  # Variable validation that refers to another variable needs 1.9.
  required_version = ">= 1.9"

  required_providers {
    llmgw = {
      source = "llmgw/llmgw"
    }
  }
}
