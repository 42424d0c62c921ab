package pvefake

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
)

func client(s *Server, secret string) *proxmox.Client {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: s.TLSConfig()}}
	return proxmox.NewClient(s.Endpoint(), proxmox.WithHTTPClient(hc), proxmox.WithAPIToken(DefaultTokenID, secret))
}

// waitTask polls a task as a client does and returns its exit status.
func waitTask(t *testing.T, task *proxmox.Task) string {
	t.Helper()
	ctx := context.Background()
	sawRunning := false
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := task.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if task.Status == "running" {
			sawRunning = true
			continue
		}
		if !sawRunning {
			t.Errorf("task %s never reported running", task.UPID)
		}
		return task.ExitStatus
	}
	t.Fatalf("task %s did not stop", task.UPID)
	return ""
}

func TestErrorsAsProxmoxReturnsThem(t *testing.T) {
	s := New(t)
	s.AddTemplate(DefaultNode, 9000, "ubuntu-2404")
	s.AddVM(DefaultNode, 142, false, map[string]string{"name": "gpu-42"})
	s.SetLock(142, "backup")
	ctx := context.Background()
	good := client(s, DefaultSecret)
	tmpl := &proxmox.VirtualMachine{}
	tmpl.New(good, DefaultNode, 9000)
	locked := &proxmox.VirtualMachine{}
	locked.New(good, DefaultNode, 142)
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"wrong token is 401", func() error {
			_, err := (&proxmox.Cluster{}).New(client(s, "wrong")).Resources(ctx, "vm")
			if !proxmox.IsNotAuthorized(err) {
				return err
			}
			return errString("not authorized")
		}, "not authorized"},
		{"taken VMID on clone", func() error {
			_, _, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 142, Name: "x"})
			return err
		}, "500 VM 142 already exists on node 'pve1'"},
		{"locked VM", func() error {
			_, err := locked.Config(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 8})
			return err
		}, "500 VM 142 is locked (backup)"},
		{"unknown node", func() error {
			_, err := good.Node(ctx, "nope")
			return err
		}, "hostname lookup 'nope' failed"},
		{"parameter error is 400 with errors", func() error {
			_, err := locked.Config(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: "many"})
			return err
		}, `"cores":"type check`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "parameter error is 400 with errors" {
				s.SetLock(142, "")
				defer s.SetLock(142, "backup")
			}
			err := tt.call()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestCloneConfigUploadDestroy walks the VM's life as go-proxmox drives it
// and checks what the fake records.
func TestCloneConfigUploadDestroy(t *testing.T) {
	s := New(t)
	s.AddTemplate(DefaultNode, 9000, "ubuntu-2404")
	s.SetConfig(9000, "scsi1", "local-lvm:vm-9000-cloudinit,media=cdrom")
	c := client(s, DefaultSecret)
	ctx := context.Background()
	tmpl := &proxmox.VirtualMachine{}
	tmpl.New(c, DefaultNode, 9000)
	_, task, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 142, Name: "gpu-42", Full: true, Storage: DiskStorage})
	if err != nil {
		t.Fatal(err)
	}
	if vm, _ := s.VM(142); vm.Lock != "clone" {
		t.Errorf("during the clone the VM's lock = %q, want clone", vm.Lock)
	}
	if got := waitTask(t, task); got != "OK" {
		t.Fatalf("clone exit status %q", got)
	}
	vm := &proxmox.VirtualMachine{}
	vm.New(c, DefaultNode, 142)
	task, err = vm.Config(ctx, proxmox.VirtualMachineOption{Name: "cpu", Value: "host"}, proxmox.VirtualMachineOption{Name: "cores", Value: 8},
		proxmox.VirtualMachineOption{Name: "sshkeys", Value: proxmox.EncodeSSHKeys("ssh-ed25519 AAAA k")})
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, task)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if vm.VirtualMachineConfig.CPU != "host" || *vm.VirtualMachineConfig.Cores != 8 || vm.Name != "gpu-42" {
		t.Errorf("config after clone+config: cpu %q cores %d name %q", vm.VirtualMachineConfig.CPU, *vm.VirtualMachineConfig.Cores, vm.Name)
	}
	if d := vm.VirtualMachineConfig.SCSIs["scsi0"]; !strings.HasPrefix(d, "local-lvm:vm-142-disk-0,") {
		t.Errorf("clone's scsi0 = %q, want its own disk", d)
	}
	if d := vm.VirtualMachineConfig.SCSIs["scsi1"]; d != "local-lvm:vm-142-cloudinit,media=cdrom" {
		t.Errorf("clone's scsi1 = %q, want its own cloud-init drive", d)
	}
	calls := s.CallsMatching(http.MethodPost, `^/nodes/pve1/qemu/142/config$`)
	if len(calls) != 1 || calls[0].Form.Get("cores") != "8" || calls[0].Form.Get("cpu") != "host" {
		t.Fatalf("recorded config calls %+v", calls)
	}

	// A change by hand shows on the next read.
	s.SetConfig(142, "cpu", "kvm64")
	_ = vm.Ping(ctx)
	if vm.VirtualMachineConfig.CPU != "kvm64" {
		t.Errorf("cpu after a change by hand = %q", vm.VirtualMachineConfig.CPU)
	}

	// A form-encoded request, as the published API documents, works too.
	req, _ := http.NewRequest(http.MethodPost, s.Endpoint()+"/nodes/pve1/qemu/142/config", strings.NewReader(url.Values{"memory": {"4096"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "PVEAPIToken="+DefaultTokenID+"="+DefaultSecret)
	res, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("form-encoded config: %s", res.Status)
	}

	var upid proxmox.UPID
	if err := c.UploadReader("/nodes/pve1/storage/local/upload", map[string]string{"content": "iso"}, "seed.iso", strings.NewReader("iso bytes"), 9, &upid); err != nil {
		t.Fatal(err)
	}
	waitTask(t, proxmox.NewTask(upid, c))
	if b, ok := s.Volume(DefaultNode, "local:iso/seed.iso"); !ok || string(b) != "iso bytes" {
		t.Fatalf("uploaded volume = %q, %v", b, ok)
	}

	// An upload of the same name replaces the file, as Proxmox's does.
	if err := c.UploadReader("/nodes/pve1/storage/local/upload", map[string]string{"content": "iso"}, "seed.iso", strings.NewReader("new bytes"), 9, &upid); err != nil {
		t.Fatalf("uploading over an existing file: %v", err)
	}
	if got := waitTask(t, proxmox.NewTask(upid, c)); got != "OK" {
		t.Fatalf("upload over an existing file: exit status %q", got)
	}
	if b, _ := s.Volume(DefaultNode, "local:iso/seed.iso"); string(b) != "new bytes" {
		t.Fatalf("volume after the second upload = %q, want the new bytes", b)
	}

	// A task that did its work and logged warnings.
	s.FailNextTask("qmconfig", "WARNINGS: 2")
	task, err = vm.Config(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 6})
	if err != nil {
		t.Fatal(err)
	}
	if got := waitTask(t, task); got != "WARNINGS: 2" {
		t.Errorf("config with warnings: exit status %q", got)
	}
	if v, _ := s.VM(142); v.Config["cores"] != "6" {
		t.Errorf("after a config that ended with warnings cores = %q, want 6 (the change happened)", v.Config["cores"])
	}

	s.FailNextTask("qmstart", "start failed: QEMU exited with code 1")
	task, err = vm.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitTask(t, task); got != "start failed: QEMU exited with code 1" {
		t.Errorf("failed start exit status %q", got)
	}
	if v, _ := s.VM(142); v.Status != "stopped" {
		t.Errorf("after a failed start the VM is %s", v.Status)
	}
	task, err = vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true})
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, task)
	if _, ok := s.VM(142); ok {
		t.Error("VM 142 still exists after destroy")
	}
	if del := s.CallsMatching(http.MethodDelete, `^/nodes/pve1/qemu/142$`); len(del) != 1 || del[0].Form.Get("purge") != "1" {
		t.Errorf("destroy calls %+v", del)
	}
}
