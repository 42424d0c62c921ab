# A key is imported by its id (llmgw ctl keys); its secret is not imported.
terraform import llmgw_api_key.search_ci key-3c8f0d8db9a2
