# The quickstart against `llmgw dev`: one fabric, the three dev nodes adopted
# with import blocks, a model of your own, and a curl to call it. See
# README.md for the steps.

# LLMGW_ENDPOINT, LLMGW_TOKEN and LLMGW_CA_CERT come from `source
# .llmgw-dev/env`; nothing else is needed.
provider "llmgw" {}

variable "dev_dir" {
  description = "The directory `llmgw dev` runs in (its --dir), relative to this directory or absolute."
  type        = string
  default     = "../../.llmgw-dev"
}

locals {
  # The dev agents' configuration holds absolute paths under the dev directory.
  dev_dir = abspath(var.dev_dir)

  # What `llmgw dev` gives each agent: node01 and node02 reach fabric ib-a
  # through mlx5_0, node03 has no fabric.
  dev_nodes = {
    node01 = { fabric = true }
    node02 = { fabric = true }
    node03 = { fabric = false }
  }
}

# ib-a is only in the dev agents' local files until it is declared here.
resource "llmgw_fabric" "ib_a" {
  name        = "ib-a"
  description = "the simulated InfiniBand fabric of node01 and node02 (llmgw dev)"
}

# The dev nodes are already running, on their local agent.yaml: import adopts
# them, and this apply declares them to the control plane, which from then
# on sends this declaration to their agents. (One block per node: for_each in
# an import block needs Terraform 1.7.)
import {
  to = llmgw_node.dev["node01"]
  id = "node01"
}

import {
  to = llmgw_node.dev["node02"]
  id = "node02"
}

import {
  to = llmgw_node.dev["node03"]
  id = "node03"
}

resource "llmgw_node" "dev" {
  for_each = local.dev_nodes

  name    = each.key
  address = "127.0.0.1"

  fabric = each.value.fabric ? {
    name     = llmgw_fabric.ib_a.name
    adapters = ["mlx5_0"]
  } : null

  labels = { dev = "true" }

  # terraform destroy tears the dev fleet down as a whole: every node goes,
  # so there is nowhere to move their replicas (sim-2node spans node01 and
  # node02, the only nodes of ib-a). They stop with the nodes instead of
  # being drained; on a fleet where nodes are removed one at a time, leave
  # the default (true): the drain moves them first, or fails at once saying
  # which replica cannot move and why.
  drain_on_destroy = false

  # llmgw dev simulates each node's hardware under DIR/nodes/<id>/.
  discovery = {
    nvidia_smi = "${local.dev_dir}/nodes/${each.key}/nvidia-smi"
    ib_root    = "${local.dev_dir}/nodes/${each.key}/infiniband"
  }
}

# A model of your own, served by the simulated engine on one H100.
resource "llmgw_model" "mine" {
  name           = "mine"
  source         = "sim://mine"
  context_length = 8192
  max_output     = 1024

  # What a request costs, in the unit budgets are in; changing it never
  # restarts the replica.
  pricing = { prompt_per_1k = 0.001, completion_per_1k = 0.002 }

  scaling = { min = 1, max = 1 }

  profiles = [{
    name      = "h100"
    engine    = "sim"
    gpu_class = "h100-80g"
    tp        = 1
  }]

  # Placed once the nodes are declared; apply returns when it serves.
  depends_on = [llmgw_node.dev]
}

# A team: its own limits, a monthly budget, and a key of its own.
resource "llmgw_project" "team" {
  name           = "team"
  rpm            = 600
  tpm            = 200000
  allowed_models = [llmgw_model.mine.name]
}

resource "llmgw_budget" "team" {
  project      = llmgw_project.team.name
  period       = "month"
  amount       = 10
  on_exhausted = "refuse"
}

resource "llmgw_api_key" "team" {
  project = llmgw_project.team.name
  name    = "quickstart"
}

output "team_api_key" {
  description = "The team's API key (terraform output -raw team_api_key); shown once, kept in state."
  value       = llmgw_api_key.team.secret
  sensitive   = true
}

output "curl" {
  description = "A request to the model, ready to paste in a shell that sourced the dev env file."
  value       = "curl -s $OPENAI_BASE_URL/chat/completions -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: application/json' -d '{\"model\": \"${llmgw_model.mine.name}\", \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}'"
}
