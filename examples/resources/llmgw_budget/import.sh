# A budget is imported by its project and period.
terraform import llmgw_budget.search_monthly search/month
