# A model added with `llmgw ctl model add` is imported by its name.
terraform import llmgw_model.qwen qwen2.5-72b
