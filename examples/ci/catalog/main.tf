# A catalog repository: this file and a folder of model YAML. The provider is
# configured from LLMGW_ENDPOINT, LLMGW_TOKEN and LLMGW_CA_CERT.
module "catalog" {
  source     = "../../../modules/model-catalog" # in your repository: "git::https://github.com/llmgw/llmgw.git//modules/model-catalog?ref=vX.Y.Z"
  models_dir = "${path.module}/models"
}

output "models" {
  value = module.catalog.generations
}
