variable "name" {
  type        = string
  nullable    = false
  description = "The node id, stated once: it is also the VM's name, its hostname and the common name of its certificate, so every message about the node names it the same way. Lowercase letters, digits and `-`, at most 63 characters, starting and ending with a letter or digit (a hostname and a Proxmox VM name). Changing it replaces the node."

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", var.name))
    error_message = "name ${jsonencode(var.name)} cannot be a hostname, a Proxmox VM name and a node id at once: use lowercase letters, digits and -, at most 63 characters, starting and ending with a letter or digit (like \"gpu-142\")."
  }
}

variable "control_plane" {
  type        = string
  nullable    = false
  description = "The control plane's agent endpoint as `host:port` (its `agent_listen`, port 7443 by default), as the VM reaches it. The host must be a name or address in the control plane's certificate, or set `control_plane_server_name`."

  validation {
    condition     = can(regex("^[^\\s/:]+:[0-9]{1,5}$", var.control_plane)) || can(regex("^\\[[0-9a-fA-F:.]+\\]:[0-9]{1,5}$", var.control_plane))
    error_message = "control_plane ${jsonencode(var.control_plane)} is not host:port (like \"10.0.0.140:7443\"): it is the control plane's agent endpoint, without a scheme."
  }
}

variable "control_plane_server_name" {
  type        = string
  default     = null
  description = "The name checked in the control plane's certificate, when `control_plane`'s host is not in it (the agent's `server_name`)."
}

variable "llmgw_binary" {
  type = object({
    url    = string
    sha256 = string
    size   = number
  })
  nullable    = false
  description = "Where the VM downloads the llmgw binary (linux/amd64 or arm64 to match the VM) and what it must be: `url` (the weights mirror or a release asset, http or https), its `sha256` (64 lowercase hex digits) and its `size` in bytes (`stat -c %s llmgw`). The download is installed as /usr/local/bin/llmgw only when both match; otherwise cloud-init fails, the agent is not started, and apply fails when the node does not register. Changing it replaces the VM."

  validation {
    condition     = can(regex("^https?://[^\\s'\"]+$", var.llmgw_binary.url))
    error_message = "llmgw_binary.url ${jsonencode(var.llmgw_binary.url)} must be an http or https URL without spaces or quotes."
  }
  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.llmgw_binary.sha256))
    error_message = "llmgw_binary.sha256 must be the binary's sha256 as 64 lowercase hex digits (sha256sum llmgw), not ${jsonencode(var.llmgw_binary.sha256)}."
  }
  validation {
    condition     = var.llmgw_binary.size >= 1 && floor(var.llmgw_binary.size) == var.llmgw_binary.size
    error_message = "llmgw_binary.size must be the binary's size in bytes (stat -c %s llmgw), a whole number above zero: a zero-byte binary is never installed."
  }
}

variable "target_node" {
  type        = string
  nullable    = false
  description = "The Proxmox node the VM is created on."
}

variable "clone_from" {
  type        = string
  nullable    = false
  description = "The template to clone, by VMID or name: a cloud image with cloud-init (Ubuntu 24.04, say), with curl or wget and sha256sum."
}

variable "address" {
  type        = string
  nullable    = false
  description = "The VM's address as CIDR (`10.0.0.142/24`). The node's `address` (where engines are reached) is its host part; the VMID defaults to its last octet."

  validation {
    condition     = can(cidrhost(var.address, 0)) && length(split("/", var.address)) == 2
    error_message = "address ${jsonencode(var.address)} is not an address with its prefix: write it like \"10.0.0.142/24\"."
  }
}

variable "gateway" {
  type        = string
  default     = null
  description = "The default gateway."

  validation {
    condition     = var.gateway == null || can(cidrhost("${coalesce(var.gateway, "x")}/32", 0)) || can(cidrhost("${coalesce(var.gateway, "x")}/128", 0))
    error_message = "gateway ${jsonencode(var.gateway)} is not an IP address."
  }
}

variable "nameservers" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "DNS servers of the VM, like `[\"10.0.0.1\"]`. A static address brings no DNS: without them the VM resolves no name, and the install from `llmgw_binary_url` and `packages` fail."
}

variable "search_domains" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "DNS search domains of the VM, like `[\"lab.example\"]`."
}

variable "vmid" {
  type        = number
  default     = null
  description = "The VM's id; default: the last octet of `address` (which must then be 100 or more)."

  validation {
    condition     = var.vmid == null || try(var.vmid >= 100 && floor(var.vmid) == var.vmid, false)
    error_message = "vmid must be a whole number, 100 or more (Proxmox's VMIDs start at 100)."
  }
}

variable "cpu_type" {
  type        = string
  default     = "host"
  nullable    = false
  description = "The VM's CPU model. Keep `host`: Proxmox's generic models (kvm64, x86-64-v2) hide AVX2 and CPU inference runs several times slower; any other value is planned with a warning, and the node reports the missing AVX2."
}

variable "cores" {
  type        = number
  default     = null
  description = "vCPU cores (the provider's default, 4, when null)."
}

variable "memory_mb" {
  type        = number
  default     = null
  description = "Memory in MiB (the provider's default, 8192, when null)."
}

variable "disk_gb" {
  type        = number
  default     = null
  description = "The boot disk's size in GiB; the clone's disk is grown to it (never shrunk). Null keeps the template's."
}

variable "storage" {
  type        = string
  default     = null
  description = "The storage for the VM's disks (e.g. `local-lvm`); default: the template's."
}

variable "iso_storage" {
  type        = string
  default     = null
  description = "The storage the cloud-init ISO is uploaded to, accepting `iso` content (the provider's default, `local`, when null)."
}

variable "bridge" {
  type        = string
  default     = null
  description = "The bridge of the VM's `net0` (the provider's default, `vmbr0`, when null)."
}

variable "ssh_keys" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "SSH public keys for the image's default user."
}

variable "packages" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "Distribution packages cloud-init installs before the agent starts, e.g. `[\"libgomp1\"]` for a llama.cpp build that needs it (the engine check reports it missing otherwise)."
}

variable "fabric" {
  type = object({
    name     = string
    adapters = list(string)
  })
  default     = null
  description = "The InfiniBand fabric the node is in (an `llmgw_fabric`'s name) and the adapters that attach it (`[\"mlx5_0\"]`). Null for a node without one, which hosts single-node replicas only."

  validation {
    condition     = var.fabric == null || try(length(var.fabric.adapters) > 0 && length(var.fabric.adapters) == length(distinct(var.fabric.adapters)), false)
    error_message = "fabric.adapters must name at least one adapter (like \"mlx5_0\"), each once."
  }
}

variable "engines" {
  type        = map(string)
  default     = {}
  nullable    = false
  description = "The path of each engine's executable on the node, by engine (`llamacpp`, `vllm`, `sglang`; `sim` needs none). The agent runs each one's version command when it starts; a failure (a missing library, say) fails apply with the engine's own message."

  validation {
    condition     = alltrue([for e in keys(var.engines) : contains(["sim", "llamacpp", "vllm", "sglang"], e)])
    error_message = "engines: unknown engine ${join(", ", [for e in keys(var.engines) : jsonencode(e) if !contains(["sim", "llamacpp", "vllm", "sglang"], e)])}; llmgw knows sim, llamacpp, vllm and sglang."
  }
  validation {
    condition     = alltrue([for e, p in var.engines : e == "sim" || startswith(p, "/")])
    error_message = "engines: every path except sim's must be absolute (like \"/opt/llama.cpp/llama-server\")."
  }
}

variable "labels" {
  type        = map(string)
  default     = {}
  nullable    = false
  description = "Free-form labels that model profiles can require."
}

variable "model_dirs" {
  type        = list(string)
  default     = []
  nullable    = false
  description = "Directories on the node whose models it reports as present."
}

variable "discovery" {
  type = object({
    nvidia_smi = optional(string)
    ib_root    = optional(string)
    cpuinfo    = optional(string)
  })
  default     = null
  description = "Where the node's hardware probes look (`nvidia_smi`, `ib_root`, `cpuinfo`); the defaults suit a normal machine."
}

variable "certificate_validity_hours" {
  type        = number
  default     = null
  description = "How long the node's certificate is valid (the provider's default, a year, when null). It is read when the VM is created; renew before it runs out with `certificate_generation`."
}

variable "certificate_generation" {
  type        = number
  default     = 1
  nullable    = false
  description = "Change it (1 → 2) to give the node a new certificate and key: the VM is replaced, booted with them. The key is never in the state, so this is the only way to renew it."
}

variable "registration_timeout" {
  type        = string
  default     = null
  description = "How long apply waits for the booted VM's agent to reach the control plane, like `15m` (the provider's default, 10m, when null). The cloud-init ISO, which holds the private key, is deleted then."
}

variable "ready_timeout" {
  type        = string
  default     = null
  description = "How long apply waits for the node to be ready with its engines checked and its fabric in service, and destroy for the node's replicas to move before the VM stops (the provider's default, 10m, when null)."
}
