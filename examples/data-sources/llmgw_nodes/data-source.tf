data "llmgw_nodes" "all" {}

output "ready_h100_nodes" {
  value = [
    for n in data.llmgw_nodes.all.nodes : n.id
    if n.state == "ready" && contains(n.gpu_classes, "h100-80g")
  ]
}
