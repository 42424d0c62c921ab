# An existing VM is imported as NODE/VMID. Import reads its CPU model, cores,
# memory, disk, bridge, name and network settings; the next apply records the
# template and user-data of the configuration without rebuilding the VM.
terraform import llmgw_proxmox_vm.gpu142 pve1/142
