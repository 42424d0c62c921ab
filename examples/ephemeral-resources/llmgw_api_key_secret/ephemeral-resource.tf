# A new API key secret on every run, never stored by Terraform: feed it to
# write-only attributes that read it only when their version changes.
ephemeral "llmgw_api_key_secret" "app" {}

resource "llmgw_api_key" "app" {
  name              = "app"
  secret_wo         = ephemeral.llmgw_api_key_secret.app.secret
  secret_wo_version = 1
}
