# 50 a day; once spent, requests go to a cheaper model, which may spend 5
# more, until midnight UTC. The day's spend never passes 55.
resource "llmgw_budget" "search_daily" {
  project            = llmgw_project.search.name
  period             = "day"
  amount             = 50
  on_exhausted       = "fallback"
  fallback_model     = llmgw_model.small.name
  fallback_allowance = 5
}

# 1,000 a month; once spent, requests are refused (HTTP 402) until the 1st.
resource "llmgw_budget" "search_monthly" {
  project = llmgw_project.search.name
  period  = "month"
  amount  = 1000
}
