resource "llmgw_model" "qwen" {
  name           = "qwen2.5-72b"
  aliases        = ["qwen", "default"]
  source         = "Qwen/Qwen2.5-72B-Instruct"
  context_length = 32768
  max_output     = 4096

  scaling = {
    min          = 1
    max          = 3
    idle_timeout = "15m"
  }

  profiles = [
    {
      name            = "tp4"
      engine          = "vllm"
      gpu_class       = "h100-80g"
      tp              = 4
      priority        = 10
      startup_timeout = "20m"
      args            = ["--max-num-seqs", "128"]
    },
    {
      name      = "tp4x2"
      engine    = "vllm"
      gpu_class = "h100-80g"
      tp        = 4
      nodes     = 2
      env       = { NCCL_SOCKET_IFNAME = "ib0" }
    },
  ]

  # What a request costs per 1,000 tokens, in the unit budgets are in.
  # Changing it never restarts a replica. Without it auth.default_price applies.
  pricing = {
    prompt_per_1k     = 0.002
    completion_per_1k = 0.006
  }

  # Fail the plan when no node can hold any profile (default "warn").
  placement_check = "error"
  # Apply returns when scaling.min replicas of the new definition serve.
  rollout_timeout = "30m"
}
