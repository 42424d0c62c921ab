variable "control_plane" {
  type        = string
  description = "The control plane's agent endpoint as the VMs reach it, host:port (its agent_listen)."
  default     = "10.0.0.140:7443"
}

variable "llmgw_binary" {
  type = object({
    url    = string
    sha256 = string
    size   = number
  })
  description = "The llmgw binary the VMs install: a release asset or a copy on the mirror, its sha256 (sha256sum) and its size in bytes (stat -c %s)."
}

variable "clone_from" {
  type        = string
  description = "The cloud-image template the VMs are cloned from, by name or VMID."
  default     = "ubuntu-2404-cloud"
}

variable "ssh_keys" {
  type        = list(string)
  description = "SSH public keys for the image's default user."
  default     = []
}
