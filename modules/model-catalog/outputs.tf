output "names" {
  description = "The names of the models the module manages, sorted."
  value       = sort(keys(llmgw_model.this))
}

output "generations" {
  description = "Model name => generation: a hash of what the model's replicas are built from. It changes when a change rolls the replicas."
  value       = { for name, m in llmgw_model.this : name => m.generation }
}

output "files" {
  description = "Model name => the file of models_dir that defines it."
  value       = local.model_files
}
