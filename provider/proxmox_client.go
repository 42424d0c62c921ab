package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	proxmox "github.com/luthermonson/go-proxmox"
)

// Bounds of the Proxmox calls: one HTTP request, one task (a full clone of a
// large disk is the slow one), and how often a task's status is polled.
const (
	pveRequestTimeout = 60 * time.Second
	pveTaskTimeout    = 30 * time.Minute
	pveTaskPoll       = 250 * time.Millisecond
)

// pveSettings is the provider's proxmox attribute with the environment
// applied.
type pveSettings struct {
	Endpoint string
	TokenID  string
	Secret   string
	CAFile   string
	Insecure bool
}

// PVE is the provider's client of the Proxmox VE API (go-proxmox with an
// API token), made in Configure when the proxmox attribute or its
// environment variables are set.
type PVE struct {
	api      *proxmox.Client
	endpoint string
}

// newPVE makes the Proxmox client, or says what is missing: the message
// names the attribute and the environment variable to set.
func newPVE(s pveSettings) (*PVE, string) {
	var missing []string
	if s.Endpoint == "" {
		missing = append(missing, "proxmox.endpoint (or "+EnvPVEEndpoint+")")
	}
	if s.TokenID == "" || s.Secret == "" {
		missing = append(missing, "proxmox.api_token_id and proxmox.api_token_secret (or "+EnvPVEToken+"=USER@REALM!TOKENID=SECRET)")
	}
	if len(missing) > 0 {
		return nil, "set " + strings.Join(missing, " and ") + " in the provider's proxmox block"
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.Insecure} //nolint:gosec // insecure is the operator's explicit choice for a lab
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Sprintf("proxmox.ca_file: reading %s: %v", s.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Sprintf("proxmox.ca_file: %s holds no PEM certificate", s.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	hc := &http.Client{Timeout: pveRequestTimeout, Transport: &http.Transport{
		TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 4,
	}}
	api := proxmox.NewClient(s.Endpoint, proxmox.WithHTTPClient(hc), proxmox.WithAPIToken(s.TokenID, s.Secret),
		proxmox.WithUserAgent("terraform-provider-llmgw"))
	return &PVE{api: api, endpoint: s.Endpoint}, ""
}

// proxmox returns the Proxmox client, or an error diagnostic saying how to
// configure it.
func (c *Client) proxmox(diags *diag.Diagnostics) *PVE {
	if c.pve != nil {
		return c.pve
	}
	diags.AddError("The provider's proxmox block is not configured",
		"llmgw_proxmox_vm talks to the Proxmox VE API: "+c.pveMissing+". Example:\n\n"+
			"  provider \"llmgw\" {\n    proxmox = {\n      endpoint         = \"https://pve1:8006/api2/json\"\n      api_token_id     = \"terraform@pve!llmgw\"\n      api_token_secret = var.pve_token_secret\n    }\n  }")
	return nil
}

// pveVM is where a VM is: its node and id, as the cluster lists it.
type pveVM struct {
	Node     string
	VMID     int
	Name     string
	Template bool
}

// vms lists the cluster's VMs and templates.
func (p *PVE) vms(ctx context.Context) ([]pveVM, error) {
	cl := (&proxmox.Cluster{}).New(p.api)
	rs, err := cl.Resources(ctx, "vm")
	if err != nil {
		return nil, fmt.Errorf("listing the cluster's VMs: %w", err)
	}
	var out []pveVM
	for _, r := range rs {
		if r.Type != "qemu" {
			continue
		}
		out = append(out, pveVM{Node: r.Node, VMID: int(r.VMID), Name: r.Name, Template: r.Template == 1})
	}
	return out, nil
}

// findVM returns the VM with vmid anywhere in the cluster, or nil.
func (p *PVE) findVM(ctx context.Context, vmid int) (*pveVM, error) {
	vms, err := p.vms(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range vms {
		if v.VMID == vmid {
			return &v, nil
		}
	}
	return nil, nil
}

// findTemplate resolves clone_from: a template's VMID or its name.
func (p *PVE) findTemplate(ctx context.Context, ref string) (*pveVM, error) {
	vms, err := p.vms(ctx)
	if err != nil {
		return nil, err
	}
	id, numeric := strconv.Atoi(ref)
	var names []string
	for _, v := range vms {
		if !v.Template {
			continue
		}
		if (numeric == nil && v.VMID == id) || v.Name == ref {
			return &v, nil
		}
		names = append(names, fmt.Sprintf("%d (%s)", v.VMID, v.Name))
	}
	if len(names) == 0 {
		names = []string{"none"}
	}
	return nil, fmt.Errorf("clone_from %q: no template with that VMID or name in the cluster; templates: %s", ref, strings.Join(names, ", "))
}

// vm is a handle on a VM for go-proxmox's calls.
func (p *PVE) vm(node string, vmid int) *proxmox.VirtualMachine {
	v := &proxmox.VirtualMachine{}
	v.New(p.api, node, vmid)
	return v
}

// readVM reads a VM's status and configuration (pending changes applied,
// as Proxmox's config endpoint returns them).
func (p *PVE) readVM(ctx context.Context, node string, vmid int) (*proxmox.VirtualMachine, error) {
	v := p.vm(node, vmid)
	if err := v.Ping(ctx); err != nil {
		return nil, fmt.Errorf("reading VM %d on %s: %w", vmid, node, err)
	}
	return v, nil
}

// wait polls a task until it stops and returns its own exit status as the
// error when that is not OK. what says what the task does.
func (p *PVE) wait(ctx context.Context, what string, task *proxmox.Task, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if task == nil {
		return nil // a synchronous change: nothing to wait for
	}
	ctx, cancel := context.WithTimeout(ctx, pveTaskTimeout)
	defer cancel()
	tick := time.NewTicker(pveTaskPoll)
	defer tick.Stop()
	for {
		if err := task.Ping(ctx); err != nil {
			return fmt.Errorf("%s: polling task %s: %w", what, task.UPID, err)
		}
		if task.Status == "stopped" {
			switch {
			case task.ExitStatus == "OK":
			case strings.HasPrefix(task.ExitStatus, "WARNINGS:"):
				// Done, with warnings in its log (a storage
				// that is nearly full, say): success.
				noteTaskWarning(ctx, what, string(task.UPID), task.ExitStatus)
			default:
				return &pveTaskError{what: what, upid: string(task.UPID), exit: task.ExitStatus}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: task %s still %s after %s: %w", what, task.UPID, task.Status, pveTaskTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// taskWarningsKey keys the taskWarnings of a context.
type taskWarningsKey struct{}

// taskWarnings collects the Proxmox tasks of one Terraform operation that
// ended with "WARNINGS: n": they succeeded, and the operator sees them as
// Terraform warnings.
type taskWarnings struct {
	mu    sync.Mutex
	diags diag.Diagnostics
}

// withTaskWarnings returns a context whose awaited tasks' warnings are
// collected in the returned taskWarnings.
func withTaskWarnings(ctx context.Context) (context.Context, *taskWarnings) {
	w := &taskWarnings{}
	return context.WithValue(ctx, taskWarningsKey{}, w), w
}

// noteTaskWarning records a task that ended with warnings in ctx's
// taskWarnings, when it has one.
func noteTaskWarning(ctx context.Context, what, upid, exit string) {
	w, _ := ctx.Value(taskWarningsKey{}).(*taskWarnings)
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.diags.AddWarning("A Proxmox VE task ended with warnings",
		fmt.Sprintf("%s: Proxmox task %s succeeded with %s. The warnings are in the task's log, under the node's Tasks in the web UI (or `pvenode task log %s`).", what, upid, exit, upid))
}

// Diagnostics are the warnings collected so far.
func (w *taskWarnings) Diagnostics() diag.Diagnostics {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.diags)
}

// pveTaskError is a Proxmox task that ended with an exit status other than
// OK; the status is Proxmox's own message.
type pveTaskError struct {
	what, upid, exit string
}

func (e *pveTaskError) Error() string {
	return fmt.Sprintf("%s: Proxmox task %s failed: %s", e.what, e.upid, e.exit)
}

// uploadISO uploads an ISO image to storage on node and waits for the copy.
func (p *PVE) uploadISO(ctx context.Context, node, storage, filename string, data []byte) error {
	var upid proxmox.UPID
	err := p.api.UploadReader(fmt.Sprintf("/nodes/%s/storage/%s/upload", node, storage),
		map[string]string{"content": "iso"}, filename, strings.NewReader(string(data)), int64(len(data)), &upid)
	return p.wait(ctx, fmt.Sprintf("uploading %s to storage %s on %s", filename, storage, node), proxmox.NewTask(upid, p.api), err)
}

// deleteVolume deletes a volume (storage:iso/name) from its storage on node
// and waits for it; a volume already gone is not an error.
func (p *PVE) deleteVolume(ctx context.Context, node, volid string) error {
	storage, _, _ := strings.Cut(volid, ":")
	var upid proxmox.UPID
	err := p.api.Delete(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, storage, volid), &upid)
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return nil
	}
	return p.wait(ctx, fmt.Sprintf("deleting %s on %s", volid, node), proxmox.NewTask(upid, p.api), err)
}

// pveDiag turns an error of a Proxmox call into a diagnostic that says what
// to do. op says what was being done.
func (p *PVE) pveDiag(op string, err error) diag.Diagnostic {
	summary, detail := explainPVE(p.endpoint, op, err)
	return diag.NewErrorDiagnostic(summary, detail)
}

// explainPVE is pveDiag's text.
func explainPVE(endpoint, op string, err error) (summary, detail string) {
	msg := err.Error()
	var te *pveTaskError
	var ue *x509.UnknownAuthorityError
	var he x509.HostnameError
	switch {
	case proxmox.IsNotAuthorized(err):
		return "Proxmox VE refused the API token",
			fmt.Sprintf("%s: %s.\n\nCheck proxmox.api_token_id and proxmox.api_token_secret (or %s=USER@REALM!TOKENID=SECRET): the token must exist (`pveum user token list USER`) and, with privilege separation, hold VM.Allocate, VM.Clone, VM.Config.*, VM.PowerMgmt, Datastore.AllocateSpace, Datastore.AllocateTemplate and Datastore.Allocate (to delete the cloud-init ISO).", op, msg, EnvPVEToken)
	case errors.As(err, &ue) || errors.As(err, &he) || strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:"):
		return "Cannot verify the Proxmox VE API's TLS certificate",
			fmt.Sprintf("%s: %s.\n\nSet proxmox.ca_file to the CA that signed it (on a Proxmox node: /etc/pve/pve-root-ca.pem), or, in a lab, proxmox.insecure = true.", op, msg)
	case errors.As(err, &te):
		return "A Proxmox VE task failed", fmt.Sprintf("%s.\n\nThe message is Proxmox's own; the task log is under the node's Tasks in the web UI.", msg)
	case strings.Contains(msg, " is locked ("):
		return "The VM is locked in Proxmox VE",
			fmt.Sprintf("%s: %s.\n\nAnother Proxmox task (a backup, clone or migration) holds the VM. Wait for it to finish, or clear a stale lock with `qm unlock VMID` on the node, then apply again.", op, msg)
	case strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout") || strings.Contains(msg, "Client.Timeout"):
		return "Cannot reach the Proxmox VE API",
			fmt.Sprintf("%s: %s is unreachable: %s.\n\nCheck proxmox.endpoint (or %s): the API listens on port 8006 of every node, as https://NODE:8006/api2/json.", op, endpoint, msg, EnvPVEEndpoint)
	}
	return "The Proxmox VE API call failed", fmt.Sprintf("%s: %s.", op, msg)
}
