# gpu-07's declaration: the control plane sends it to the agent, whose local
# file then needs only the server address, the certificate and the key.
resource "llmgw_node" "gpu07" {
  name    = llmgw_node_certificate.gpu07.node_name
  address = "10.0.0.7"

  fabric = {
    name     = llmgw_fabric.ib_a.name
    adapters = ["mlx5_0", "mlx5_1"]
  }

  engines    = { vllm = "/opt/vllm/bin/vllm" }
  labels     = { rack = "a" }
  model_dirs = ["/models"]

  # Apply waits until the agent is connected and ib-a is in service.
  ready_timeout = "15m"
}
