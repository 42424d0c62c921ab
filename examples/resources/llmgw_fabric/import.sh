# A fabric made with the management API is imported by its name.
terraform import llmgw_fabric.ib_a ib-a
