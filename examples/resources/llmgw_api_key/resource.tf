# Flow 1: the control plane generates the secret; Terraform keeps it in state
# (sensitive). Protect the state, and read the key from it:
#   terraform output -raw search_ci_key
resource "llmgw_api_key" "search_ci" {
  project    = llmgw_project.search.name
  name       = "search-ci"
  expires_at = "2027-01-01T00:00:00Z"
  rpm        = 60
}

output "search_ci_key" {
  value     = llmgw_api_key.search_ci.secret
  sensitive = true
}

# Flow 2 (Terraform 1.11 or later): the secret never enters the plan or the
# state. The provider generates it in an ephemeral resource; it is written,
# write-only, to the key and to a secret store, both read only when
# secret_wo_version changes. Bump the version to rotate.
ephemeral "llmgw_api_key_secret" "search_app" {}

resource "llmgw_api_key" "search_app" {
  project           = llmgw_project.search.name
  name              = "search-app"
  secret_wo         = ephemeral.llmgw_api_key_secret.search_app.secret
  secret_wo_version = 1
}

resource "aws_secretsmanager_secret_version" "search_app" {
  secret_id                = aws_secretsmanager_secret.search_app.id
  secret_string_wo         = ephemeral.llmgw_api_key_secret.search_app.secret
  secret_string_wo_version = 1
}
