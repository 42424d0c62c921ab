terraform {
  # import blocks need Terraform 1.5 or later.
  required_version = ">= 1.5"

  required_providers {
    llmgw = {
      source = "llmgw/llmgw"
    }
  }
}
