# llmgw_node_certificate cannot be imported: its private key exists only in
# the Terraform state that created it, so the command below fails with a
# diagnostic saying so. Declare a new certificate for the node instead; a
# certificate made with `llmgw cert issue-node` stays valid until it expires.
terraform import llmgw_node_certificate.gpu07 gpu-07
