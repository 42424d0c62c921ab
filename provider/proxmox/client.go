package proxmox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pveapi "github.com/luthermonson/go-proxmox"

	"github.com/llmgw/llmgw/internal/buildinfo"
)

// Bounds of the Proxmox calls: one HTTP request, one task (a full clone of a
// large disk is the slow one), and how often a task's status is polled.
const (
	requestTimeout = 60 * time.Second
	taskTimeout    = 30 * time.Minute
	taskPoll       = 250 * time.Millisecond
)

// Settings say how to reach the Proxmox VE API.
type Settings struct {
	// Endpoint is the API's URL, like https://pve1:8006/api2/json.
	Endpoint string
	// TokenID (USER@REALM!TOKENID) and Secret are the API token.
	TokenID string
	Secret  string
	// CAFile is a PEM file of the CA that signed the API's certificate;
	// empty means the system's roots.
	CAFile string
	// Insecure skips verifying the API's certificate.
	Insecure bool
}

// Client is a client of the Proxmox VE API.
type Client struct {
	api      *pveapi.Client
	endpoint string
}

// New makes the client; it does not connect. The only error is a CAFile
// that cannot be read or holds no certificate.
func New(s Settings) (*Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.Insecure} //nolint:gosec // insecure is the operator's explicit choice for a lab
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", s.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", s.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	hc := &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 4,
	}}
	api := pveapi.NewClient(s.Endpoint, pveapi.WithHTTPClient(hc), pveapi.WithAPIToken(s.TokenID, s.Secret),
		pveapi.WithUserAgent(buildinfo.UserAgent("terraform-provider-llmgw")))
	return &Client{api: api, endpoint: s.Endpoint}, nil
}

// Endpoint is the API's URL, for messages.
func (c *Client) Endpoint() string { return c.endpoint }

// VM is where a VM is: its node and id, as the cluster lists it.
type VM struct {
	Node     string
	VMID     int
	Name     string
	Template bool
}

// CheckNode reports an error when the cluster has no node called node.
func (c *Client) CheckNode(ctx context.Context, node string) error {
	_, err := c.api.Node(ctx, node)
	return err
}

// vms lists the cluster's VMs and templates.
func (c *Client) vms(ctx context.Context) ([]VM, error) {
	cl := (&pveapi.Cluster{}).New(c.api)
	rs, err := cl.Resources(ctx, "vm")
	if err != nil {
		return nil, fmt.Errorf("listing the cluster's VMs: %w", err)
	}
	var out []VM
	for _, r := range rs {
		if r.Type != "qemu" {
			continue
		}
		out = append(out, VM{Node: r.Node, VMID: int(r.VMID), Name: r.Name, Template: r.Template == 1})
	}
	return out, nil
}

// FindVM returns the VM with vmid anywhere in the cluster, or nil.
func (c *Client) FindVM(ctx context.Context, vmid int) (*VM, error) {
	vms, err := c.vms(ctx)
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

// FindTemplate resolves a template reference (clone_from): its VMID or its
// name. The error lists the templates there are.
func (c *Client) FindTemplate(ctx context.Context, ref string) (*VM, error) {
	vms, err := c.vms(ctx)
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

// VM is a handle on a VM for go-proxmox's calls; it reads nothing.
func (c *Client) VM(node string, vmid int) *pveapi.VirtualMachine {
	v := &pveapi.VirtualMachine{}
	v.New(c.api, node, vmid)
	return v
}

// ReadVM reads a VM's status and configuration (pending changes applied,
// as Proxmox's config endpoint returns them).
func (c *Client) ReadVM(ctx context.Context, node string, vmid int) (*pveapi.VirtualMachine, error) {
	v := c.VM(node, vmid)
	if err := v.Ping(ctx); err != nil {
		return nil, fmt.Errorf("reading VM %d on %s: %w", vmid, node, err)
	}
	return v, nil
}

// Wait takes what a go-proxmox call that starts a task returned, polls the
// task until it stops, and returns its own exit status as a *TaskError
// when that is not OK. what says what the task does. A task that ends with
// warnings succeeded; its warning goes to ctx's TaskWarnings.
func (c *Client) Wait(ctx context.Context, what string, task *pveapi.Task, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if task == nil {
		return nil // a synchronous change: nothing to wait for
	}
	ctx, cancel := context.WithTimeout(ctx, taskTimeout)
	defer cancel()
	tick := time.NewTicker(taskPoll)
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
				noteTaskWarning(ctx, TaskWarning{What: what, UPID: string(task.UPID), Exit: task.ExitStatus})
			default:
				return &TaskError{What: what, UPID: string(task.UPID), Exit: task.ExitStatus}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: task %s still %s after %s: %w", what, task.UPID, task.Status, taskTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// TaskError is a Proxmox task that ended with an exit status other than
// OK; Exit is Proxmox's own message.
type TaskError struct {
	What, UPID, Exit string
}

func (e *TaskError) Error() string {
	return fmt.Sprintf("%s: Proxmox task %s failed: %s", e.What, e.UPID, e.Exit)
}

// TaskWarning is a task that succeeded with "WARNINGS: n" as its exit
// status.
type TaskWarning struct {
	What, UPID, Exit string
}

// TaskWarnings collects the tasks of one operation that ended with
// warnings, for the operator to see.
type TaskWarnings struct {
	mu   sync.Mutex
	list []TaskWarning
}

// taskWarningsKey keys the TaskWarnings of a context.
type taskWarningsKey struct{}

// WithTaskWarnings returns a context whose awaited tasks' warnings are
// collected in the returned TaskWarnings.
func WithTaskWarnings(ctx context.Context) (context.Context, *TaskWarnings) {
	w := &TaskWarnings{}
	return context.WithValue(ctx, taskWarningsKey{}, w), w
}

// noteTaskWarning records w in ctx's TaskWarnings, when it has one.
func noteTaskWarning(ctx context.Context, tw TaskWarning) {
	w, _ := ctx.Value(taskWarningsKey{}).(*TaskWarnings)
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, tw)
}

// List returns the warnings collected so far.
func (w *TaskWarnings) List() []TaskWarning {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}

// UploadISO uploads an ISO image to storage on node and waits for the copy.
func (c *Client) UploadISO(ctx context.Context, node, storage, filename string, data []byte) error {
	var upid pveapi.UPID
	err := c.api.UploadReader(fmt.Sprintf("/nodes/%s/storage/%s/upload", node, storage),
		map[string]string{"content": "iso"}, filename, strings.NewReader(string(data)), int64(len(data)), &upid)
	return c.Wait(ctx, fmt.Sprintf("uploading %s to storage %s on %s", filename, storage, node), pveapi.NewTask(upid, c.api), err)
}

// DeleteVolume deletes a volume (storage:iso/name) from its storage on node
// and waits for it; a volume already gone is not an error.
func (c *Client) DeleteVolume(ctx context.Context, node, volid string) error {
	storage, _, _ := strings.Cut(volid, ":")
	var upid pveapi.UPID
	err := c.api.Delete(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, storage, volid), &upid)
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return nil
	}
	return c.Wait(ctx, fmt.Sprintf("deleting %s on %s", volid, node), pveapi.NewTask(upid, c.api), err)
}
