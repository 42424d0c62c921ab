variable "models_dir" {
  type        = string
  description = "A directory of model definitions, one model per *.yaml (or *.yml) file, in the shape `llmgw ctl model add -f` reads. Subdirectories are not read."

  validation {
    condition     = length(setunion(fileset(var.models_dir, "*.yaml"), fileset(var.models_dir, "*.yml"))) > 0 || var.allow_empty
    error_message = "models_dir ${var.models_dir} holds no *.yaml file: a wrong path would remove every model of the catalog. Set allow_empty = true if an empty catalog is what you want."
  }
}

variable "allow_empty" {
  type        = bool
  default     = false
  nullable    = false
  description = "Whether models_dir may hold no model file (which removes every model the module manages)."
}

variable "placement_check" {
  type        = string
  default     = null
  description = "llmgw_model's placement_check for every model: `error` fails the plan when no node can hold a model, `warn` (the provider's default) shows the reasons as a warning, `off` skips the dry run."

  validation {
    condition     = var.placement_check == null || contains(["error", "warn", "off"], coalesce(var.placement_check, "warn"))
    error_message = "placement_check must be \"error\", \"warn\" or \"off\"."
  }
}

variable "wait_for_rollout" {
  type        = bool
  default     = null
  description = "llmgw_model's wait_for_rollout for every model: whether apply waits until scaling.min replicas of each new definition are ready (the provider's default is true)."
}

variable "rollout_timeout" {
  type        = string
  default     = null
  description = "llmgw_model's rollout_timeout for every model, like `90s` or `10m` (the provider's default is 10m)."
}
