# A project made with `llmgw ctl projects create` is imported by its name.
terraform import llmgw_project.search search
