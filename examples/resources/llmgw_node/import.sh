# A running node, declared or not, is imported by its node id: its effective
# declaration is read into state and the next apply declares it.
terraform import llmgw_node.gpu07 gpu-07
