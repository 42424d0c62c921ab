// Package proxmox is the Terraform provider's room for Proxmox VE: a client
// of the Proxmox VE API (go-proxmox with an API token) that finds VMs and
// templates, waits for tasks and uploads or deletes ISO volumes; the reading
// of a VM's configuration (boot disk, bridge, cloud-init drives); and the
// NoCloud seed ISO a VM first boots with.
//
// It knows nothing of Terraform: errors are Go errors, and the provider
// turns them into diagnostics.
package proxmox
