data "llmgw_placement" "qwen" {
  model = "qwen2.5-72b"
}

output "qwen_placement" {
  value = data.llmgw_placement.qwen.placed ? "placed with profile ${data.llmgw_placement.qwen.profile}" : data.llmgw_placement.qwen.text
}
