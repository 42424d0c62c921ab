# A team's project: its own limits, and only the models it may use.
resource "llmgw_project" "search" {
  name           = "search"
  rpm            = 600
  tpm            = 200000
  allowed_models = [llmgw_model.qwen.name]
}
