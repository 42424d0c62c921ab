# The mirror holds Qwen's q4_k_m GGUF; the model's nodes fetch it from there.
resource "llmgw_mirror_weights" "qwen" {
  mirror  = "https://models.internal:8082"
  model   = "qwen2.5-14b-instruct"
  version = "2026-03"
  source  = "hf:Qwen/Qwen2.5-14B-Instruct-GGUF/qwen2.5-14b-instruct-q4_k_m.gguf"
  timeout = "3h"
}

resource "llmgw_model" "qwen" {
  name   = "qwen2.5-14b"
  source = "${llmgw_mirror_weights.qwen.url}qwen2.5-14b-instruct-q4_k_m.gguf"
  profiles = [{
    name   = "cpu"
    engine = "llamacpp"
  }]
}
