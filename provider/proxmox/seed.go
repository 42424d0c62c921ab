package proxmox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// Seed is what a VM's NoCloud seed carries.
type Seed struct {
	Hostname string
	VMID     int
	UserData string
	SSHKeys  []string
	Address  string // CIDR
	Gateway  string
	// Nameservers and SearchDomains are the resolver's settings; without
	// them the image resolves nothing (a static address brings no DNS).
	Nameservers   []string
	SearchDomains []string
}

// Files are the seed's files: user-data as given (a minimal one setting the
// hostname when empty), meta-data with the instance id, hostname and SSH
// keys, and a network-config that gives the first Ethernet interface the
// static address, the default route and the DNS servers and search domains.
func (c Seed) Files() map[string]string {
	userData := c.UserData
	if strings.TrimSpace(userData) == "" {
		userData = fmt.Sprintf("#cloud-config\nhostname: %s\n", c.Hostname)
	}
	var meta strings.Builder
	fmt.Fprintf(&meta, "instance-id: llmgw-%s-%d\nlocal-hostname: %s\n", c.Hostname, c.VMID, c.Hostname)
	if len(c.SSHKeys) > 0 {
		meta.WriteString("public-keys:\n")
		for _, k := range c.SSHKeys {
			fmt.Fprintf(&meta, "  - %q\n", strings.TrimSpace(k))
		}
	}
	var netcfg strings.Builder
	fmt.Fprintf(&netcfg, "version: 2\nethernets:\n  primary:\n    match:\n      name: \"e*\"\n    addresses: [%q]\n", c.Address)
	if c.Gateway != "" {
		fmt.Fprintf(&netcfg, "    routes:\n      - to: default\n        via: %q\n", c.Gateway)
	}
	if len(c.Nameservers) > 0 || len(c.SearchDomains) > 0 {
		netcfg.WriteString("    nameservers:\n")
		if len(c.Nameservers) > 0 {
			fmt.Fprintf(&netcfg, "      addresses: [%s]\n", quotedList(c.Nameservers))
		}
		if len(c.SearchDomains) > 0 {
			fmt.Fprintf(&netcfg, "      search: [%s]\n", quotedList(c.SearchDomains))
		}
	}
	return map[string]string{"user-data": userData, "meta-data": meta.String(), "network-config": netcfg.String()}
}

// quotedList is a YAML flow list's items, each double-quoted.
func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, v := range items {
		q[i] = fmt.Sprintf("%q", strings.TrimSpace(v))
	}
	return strings.Join(q, ", ")
}

// ISO builds the seed as an ISO 9660 image labelled cidata (the NoCloud
// datasource's volume). The files pass through a private temporary
// directory, removed before returning, since user-data carries a key.
func (c Seed) ISO() ([]byte, error) {
	dir, err := os.MkdirTemp("", "llmgw-cidata-")
	if err != nil {
		return nil, fmt.Errorf("making a work directory for the cloud-init ISO: %w", err)
	}
	defer os.RemoveAll(dir)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return nil, fmt.Errorf("making a work directory for the cloud-init ISO: %w", err)
	}
	path := filepath.Join(dir, "cidata.iso")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return nil, fmt.Errorf("creating the cloud-init ISO: %w", err)
	}
	st, err := file.OpenFromPath(path, false)
	if err != nil {
		return nil, fmt.Errorf("opening the cloud-init ISO: %w", err)
	}
	defer st.Close()
	fs, err := iso9660.Create(st, 0, 0, 2048, ws)
	if err != nil {
		return nil, fmt.Errorf("creating the cloud-init ISO: %w", err)
	}
	for name, content := range c.Files() {
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return nil, fmt.Errorf("adding %s to the cloud-init ISO: %w", name, err)
		}
		if _, err := f.Write([]byte(content)); err != nil {
			f.Close()
			return nil, fmt.Errorf("writing %s to the cloud-init ISO: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("writing %s to the cloud-init ISO: %w", name, err)
		}
	}
	if err := fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: "cidata"}); err != nil {
		return nil, fmt.Errorf("finishing the cloud-init ISO: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the cloud-init ISO: %w", err)
	}
	return b, nil
}
