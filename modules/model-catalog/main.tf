# One llmgw_model per YAML file of var.models_dir, keyed by the model's name.
# The keys of a file are those of `llmgw ctl model add -f`; a key left out of
# the file is left out of the resource (null), so the provider's defaults and
# the control plane's agree and a plan after apply is empty.

locals {
  files = setunion(fileset(var.models_dir, "*.yaml"), fileset(var.models_dir, "*.yml"))

  # File name => decoded definition. A file that is not YAML fails here,
  # with Terraform naming the file.
  definitions = { for f in local.files : f => yamldecode(file("${var.models_dir}/${f}")) }

  # Model name => the files that define it (more than one is an error,
  # reported by the precondition below). A file without a name is keyed by
  # its file name so that the precondition can name it.
  files_by_name = { for f, m in local.definitions : try(tostring(m.name), f) => f... }

  model_keys   = ["name", "aliases", "source", "routing_profile", "context_length", "max_output", "scaling", "profiles"]
  scaling_keys = ["min", "max", "idle_timeout"]
  profile_keys = [
    "name", "engine", "gpu_class", "tp", "nodes", "weight", "priority", "startup_timeout",
    "min_memory_gb", "min_disk_gb", "labels", "args", "env", "launch_mode",
  ]

  # File name => keys the catalog does not know, spelled as in catalog
  # errors (scaling.x, profiles[0].x). `llmgw ctl model add -f` rejects
  # them; so does the module, instead of dropping them silently.
  unknown_keys = {
    for f, m in local.definitions : f => try(concat(
      tolist(setsubtract(keys(m), local.model_keys)),
      [for k in setsubtract(keys(try(m.scaling, {})), local.scaling_keys) : "scaling.${k}"],
      flatten([for i, p in try(m.profiles, []) : [for k in setsubtract(keys(p), local.profile_keys) : "profiles[${i}].${k}"]]),
    ), ["(the file is not a YAML mapping)"])
  }

  # Model name => its file. The resource's for_each is this map of short
  # strings, not of the decoded definitions: with those, each instance cost
  # Terraform work that grew with the whole collection, a plan grew with
  # the square of the catalog (a third of a 200-model plan's CPU, measured
  # by BenchmarkTerraformPlan200Models). Each instance reads its own
  # definition from local.definitions instead.
  model_files = { for name, fs in local.files_by_name : name => fs[0] }
}

resource "llmgw_model" "this" {
  for_each = local.model_files

  name            = each.key
  aliases         = try(local.definitions[each.value].aliases, null)
  source          = try(local.definitions[each.value].source, null)
  routing_profile = try(local.definitions[each.value].routing_profile, null)
  context_length  = try(local.definitions[each.value].context_length, null)
  max_output      = try(local.definitions[each.value].max_output, null)

  scaling = try(local.definitions[each.value].scaling, null) == null ? null : {
    min          = try(local.definitions[each.value].scaling.min, null)
    max          = try(local.definitions[each.value].scaling.max, null)
    idle_timeout = try(local.definitions[each.value].scaling.idle_timeout, null)
  }

  profiles = [
    for p in try(local.definitions[each.value].profiles, []) : {
      name            = try(p.name, null)
      engine          = try(p.engine, null)
      gpu_class       = try(p.gpu_class, null)
      tp              = try(p.tp, null)
      nodes           = try(p.nodes, null)
      weight          = try(p.weight, null)
      priority        = try(p.priority, null)
      startup_timeout = try(p.startup_timeout, null)
      min_memory_gb   = try(p.min_memory_gb, null)
      min_disk_gb     = try(p.min_disk_gb, null)
      labels          = try(p.labels, null)
      args            = try(p.args, null)
      env             = try(p.env, null)
      launch_mode     = try(p.launch_mode, null)
    }
  ]

  placement_check  = var.placement_check
  wait_for_rollout = var.wait_for_rollout
  rollout_timeout  = var.rollout_timeout

  lifecycle {
    precondition {
      condition     = length(local.files_by_name[each.key]) == 1
      error_message = "Model ${each.key} is defined in more than one file of ${var.models_dir}: ${join(", ", local.files_by_name[each.key])}. Keep one file per model."
    }
    precondition {
      condition     = can(tostring(local.definitions[each.value].name))
      error_message = "${var.models_dir}/${each.value}: name is required."
    }
    precondition {
      condition     = length(local.unknown_keys[each.value]) == 0
      error_message = "${var.models_dir}/${each.value}: unknown key ${join(", ", local.unknown_keys[each.value])} (llmgw ctl model add -f would reject it too)."
    }
    precondition {
      condition     = length(try(local.definitions[each.value].profiles, [])) > 0
      error_message = "${var.models_dir}/${each.value}: profiles: a model needs at least one profile."
    }
  }
}
