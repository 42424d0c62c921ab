// Package pvefake is a Proxmox VE API server for tests: the few endpoints
// llmgw_proxmox_vm calls, answered the way the published API
// (https://pve.proxmox.com/pve-docs/api-viewer/) answers them. Requests are
// /api2/json paths with form-encoded (or JSON) parameters, answers are
// {"data": …} envelopes, long operations return a UPID whose status is
// polled at /nodes/{node}/tasks/{upid}/status (running, then stopped with
// exitstatus "OK", "WARNINGS: n" or an error), authentication is an API token
// (Authorization: PVEAPIToken=USER@REALM!ID=SECRET), and errors are an HTTP
// status whose reason phrase carries Proxmox's message (400 also carries
// {"errors": {param: message}}).
//
// The server speaks TLS (httptest), records every call, keeps uploaded ISOs
// so a test can read the user-data they carry, and lets a test change a VM
// by hand, as an operator would in the web UI.
package pvefake

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// Defaults of a new fake: one node with a directory storage for ISOs and an
// LVM-thin storage for disks, and the token that is accepted.
const (
	DefaultNode    = "pve1"
	ISOStorage     = "local"
	DiskStorage    = "local-lvm"
	DefaultTokenID = "terraform@pve!llmgw"
	DefaultSecret  = "0b4a8a52-2f4e-4c9e-9d1a-6a8c1b0e7f11"
)

// Call is one request as the server received it.
type Call struct {
	Method string
	// Path is the API path without the /api2/json prefix.
	Path string
	// Form holds the request's parameters: query, form-encoded or JSON body,
	// and the non-file fields of a multipart upload.
	Form url.Values
}

// VM is a virtual machine (or template) as the fake holds it.
type VM struct {
	VMID     int
	Node     string
	Status   string // running or stopped
	Lock     string
	Template bool
	// Config is the VM's configuration, keys and values as `qm config`
	// prints them.
	Config map[string]string
}

type task struct {
	upid, node, typ, id string
	polls               int
	exit                string
	done                func() // applied when the task ends successfully
	start               time.Time
}

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	t testing.TB

	mu       sync.Mutex
	token    string
	nodes    []string
	vms      map[int]*VM
	volumes  map[string][]byte // "node/volid" → bytes
	tasks    map[string]*task
	failNext map[string]string // task type → exit status of its next run
	calls    []Call
	seq      int
}

// New starts a fake with one node (DefaultNode) and its storages; it is
// closed when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		t: t, token: DefaultTokenID + "=" + DefaultSecret, nodes: []string{DefaultNode},
		vms: map[int]*VM{}, volumes: map[string][]byte{}, tasks: map[string]*task{}, failNext: map[string]string{},
	}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Endpoint is the API's base URL (…/api2/json), as the provider's endpoint.
func (s *Server) Endpoint() string { return s.URL + "/api2/json" }

// CAFile writes the server's certificate as PEM into dir and returns its
// path, for the provider's ca_file.
func (s *Server) CAFile(dir string) string {
	p := filepath.Join(dir, "pve-ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	if err := os.WriteFile(p, b, 0o600); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// AddNode adds a cluster node.
func (s *Server) AddNode(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = append(s.nodes, name)
}

// AddVM adds a VM (running) or, with template, a template (stopped) on node
// with config (a name key included).
func (s *Server) AddVM(node string, vmid int, template bool, config map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm := &VM{VMID: vmid, Node: node, Status: "running", Template: template, Config: maps.Clone(config)}
	if template {
		vm.Status = "stopped"
		vm.Config["template"] = "1"
	}
	s.vms[vmid] = vm
}

// AddTemplate adds a cloud-image template with a 4 GiB scsi0 disk.
func (s *Server) AddTemplate(node string, vmid int, name string) {
	s.AddVM(node, vmid, true, map[string]string{
		"name": name, "cores": "1", "memory": "2048", "cpu": "kvm64", "scsihw": "virtio-scsi-single",
		"scsi0": fmt.Sprintf("%s:base-%d-disk-0,size=4G", DiskStorage, vmid), "boot": "order=scsi0",
		"net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0", "ostype": "l26",
	})
}

// VM returns a copy of a VM, or false when there is none with that id.
func (s *Server) VM(vmid int) (VM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[vmid]
	if !ok {
		return VM{}, false
	}
	c := *vm
	c.Config = maps.Clone(vm.Config)
	return c, true
}

// SetConfig changes (or, with an empty value, removes) one key of a VM's
// configuration behind the API's back, as a change made by hand.
func (s *Server) SetConfig(vmid int, key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[vmid]
	if !ok {
		s.t.Fatalf("pvefake: SetConfig: no VM %d", vmid)
	}
	if value == "" {
		delete(vm.Config, key)
		return
	}
	vm.Config[key] = value
}

// SetLock locks (or with "" unlocks) a VM, as a running backup or clone does.
func (s *Server) SetLock(vmid int, lock string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if vm, ok := s.vms[vmid]; ok {
		vm.Lock = lock
	}
}

// FailNextTask makes the next task of type typ (qmclone, qmconfig, qmresize,
// qmstart, qmstop, qmdestroy, imgcopy, imgdel) end with exitstatus instead
// of "OK", without its effect — unless exitstatus is "WARNINGS: n", which
// Proxmox reports for a task that succeeded with warnings in its log.
func (s *Server) FailNextTask(typ, exitstatus string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[typ] = exitstatus
}

// Calls returns the calls received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallsMatching returns the calls with method whose path matches the
// regular expression path.
func (s *Server) CallsMatching(method, path string) []Call {
	re := regexp.MustCompile(path)
	var out []Call
	for _, c := range s.Calls() {
		if c.Method == method && re.MatchString(c.Path) {
			out = append(out, c)
		}
	}
	return out
}

// Volume returns the bytes of a volume (e.g. "local:iso/x.iso") on node.
func (s *Server) Volume(node, volid string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.volumes[node+"/"+volid]
	return b, ok
}

// Volumes lists the volume ids on node, sorted.
func (s *Server) Volumes(node string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.volumes {
		if n, v, _ := strings.Cut(k, "/"); n == node {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// ISOFile reads file name (e.g. "user-data") from an uploaded ISO 9660
// image, as a VM's cloud-init would.
func (s *Server) ISOFile(node, volid, name string) (string, error) {
	b, ok := s.Volume(node, volid)
	if !ok {
		return "", fmt.Errorf("no volume %s on %s", volid, node)
	}
	p := filepath.Join(s.t.TempDir(), "cidata.iso")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return "", err
	}
	st, err := file.OpenFromPath(p, true)
	if err != nil {
		return "", err
	}
	defer st.Close()
	fs, err := iso9660.Read(st, int64(len(b)), 0, 2048)
	if err != nil {
		return "", fmt.Errorf("reading %s as ISO 9660: %w", volid, err)
	}
	data, err := fs.ReadFile(strings.TrimPrefix(name, "/"))
	if err != nil {
		return "", fmt.Errorf("reading %s from %s: %w", name, volid, err)
	}
	return string(data), nil
}

// apiError is an error answer: status with Proxmox's message as the reason
// phrase, and for 400 the per-parameter errors.
type apiError struct {
	status int
	msg    string
	params map[string]string
}

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, "/api2/json")
	if !ok {
		writeError(w, errorf(http.StatusNotImplemented, "Method '%s %s' not implemented", r.Method, r.URL.Path))
		return
	}
	form, up, err := params(r)
	if err != nil {
		writeError(w, errorf(http.StatusBadRequest, "Parameter verification failed."))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Method: r.Method, Path: p, Form: form})
	if r.Header.Get("Authorization") != "PVEAPIToken="+s.token {
		// pveproxy delays unauthorized answers; the fake does not.
		writeError(w, errorf(http.StatusUnauthorized, "authentication failure"))
		return
	}
	data, aerr := s.route(r.Method, strings.Split(strings.Trim(p, "/"), "/"), form, up)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

// upload is the file part of a multipart upload.
type upload struct {
	name string
	data []byte
}

// params collects the request's parameters from the query and the body
// (form, multipart or JSON, which go-proxmox sends), and the file of an
// upload.
func params(r *http.Request) (url.Values, *upload, error) {
	form := url.Values{}
	for k, v := range r.URL.Query() {
		form[k] = v
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]any
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil && err != io.EOF {
			return nil, nil, err
		}
		for k, v := range m {
			switch x := v.(type) {
			case string:
				form.Set(k, x)
			case float64:
				form.Set(k, strconv.FormatFloat(x, 'f', -1, 64))
			case bool:
				form.Set(k, map[bool]string{true: "1", false: "0"}[x])
			default:
				form.Set(k, fmt.Sprint(x))
			}
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, nil, err
		}
		for k, v := range r.PostForm {
			form[k] = v
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			return nil, nil, err
		}
		for k, v := range r.MultipartForm.Value {
			form[k] = v
		}
		if fhs := r.MultipartForm.File["filename"]; len(fhs) > 0 {
			f, err := fhs[0].Open()
			if err != nil {
				return nil, nil, err
			}
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil {
				return nil, nil, err
			}
			return form, &upload{name: fhs[0].Filename, data: b}, nil
		}
	}
	return form, nil, nil
}

// writeError answers as pveproxy does: the message is the HTTP reason
// phrase, which net/http cannot set, so the connection is taken over.
func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"data": nil}
	if e.params != nil {
		body["errors"] = e.params
	}
	b, _ := json.Marshal(body)
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, e.msg, e.status)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	reason := strings.NewReplacer("\r", " ", "\n", " ").Replace(e.msg)
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", e.status, reason, len(b), b)
	_ = buf.Flush()
}

// route dispatches one call; s.mu is held.
func (s *Server) route(method string, seg []string, form url.Values, up *upload) (any, *apiError) {
	n := len(seg)
	switch {
	case method == http.MethodGet && n == 2 && seg[0] == "cluster" && seg[1] == "status":
		return []map[string]any{{"type": "cluster", "name": "fake", "quorate": 1, "nodes": len(s.nodes)}}, nil
	case method == http.MethodGet && n == 2 && seg[0] == "cluster" && seg[1] == "resources":
		return s.resources(form.Get("type")), nil
	case method == http.MethodGet && n == 2 && seg[0] == "cluster" && seg[1] == "nextid":
		return s.nextID(form.Get("vmid"))
	case n >= 2 && seg[0] == "nodes":
		node := seg[1]
		if !slices.Contains(s.nodes, node) {
			return nil, errorf(http.StatusInternalServerError, "hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", node, node)
		}
		return s.routeNode(method, node, seg[2:], form, up)
	}
	return nil, errorf(http.StatusNotImplemented, "Method '%s /%s' not implemented", method, strings.Join(seg, "/"))
}

func (s *Server) routeNode(method, node string, seg []string, form url.Values, up *upload) (any, *apiError) {
	n := len(seg)
	switch {
	case method == http.MethodGet && n == 1 && seg[0] == "status":
		return map[string]any{"uptime": 3600, "cpuinfo": map[string]any{"cpus": 32, "model": "AMD EPYC 7543", "flags": "avx avx2 fma"}}, nil
	case method == http.MethodGet && n == 3 && seg[0] == "tasks" && seg[2] == "status":
		return s.taskStatus(node, seg[1])
	case method == http.MethodPost && n == 3 && seg[0] == "storage" && seg[2] == "upload":
		return s.upload(node, seg[1], form, up)
	case method == http.MethodDelete && n >= 4 && seg[0] == "storage" && seg[2] == "content":
		// The volume id (local:iso/x.iso) holds a slash, sent unescaped.
		return s.deleteVolume(node, seg[1], strings.Join(seg[3:], "/"))
	case n >= 2 && seg[0] == "qemu":
		vmid, err := strconv.Atoi(seg[1])
		if err != nil {
			return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: map[string]string{"vmid": "type check ('integer') failed - got '" + seg[1] + "'"}}
		}
		return s.routeVM(method, node, vmid, seg[2:], form)
	}
	return nil, errorf(http.StatusNotImplemented, "Method '%s /nodes/%s/%s' not implemented", method, node, strings.Join(seg, "/"))
}

func (s *Server) routeVM(method, node string, vmid int, seg []string, form url.Values) (any, *apiError) {
	vm, ok := s.vms[vmid]
	if !ok || vm.Node != node {
		return nil, errorf(http.StatusInternalServerError, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
	}
	op := strings.Join(seg, "/")
	switch {
	case method == http.MethodGet && op == "status/current":
		return s.vmStatus(vm), nil
	case method == http.MethodGet && op == "config":
		return vmConfig(vm), nil
	}
	// Everything else changes the VM, which a lock forbids.
	if vm.Lock != "" {
		return nil, errorf(http.StatusInternalServerError, "VM %d is locked (%s)", vmid, vm.Lock)
	}
	switch {
	case method == http.MethodPost && op == "clone":
		return s.clone(vm, form)
	case (method == http.MethodPost || method == http.MethodPut) && op == "config":
		return s.config(vm, form, method == http.MethodPost)
	case method == http.MethodPut && op == "resize":
		return s.resize(vm, form)
	case method == http.MethodPost && op == "status/start":
		if vm.Template {
			return nil, errorf(http.StatusInternalServerError, "you can't start a vm if it's a template")
		}
		return s.newTask(node, "qmstart", vmid, func() { vm.Status = "running" }), nil
	case method == http.MethodPost && op == "status/stop":
		return s.newTask(node, "qmstop", vmid, func() { vm.Status = "stopped" }), nil
	case method == http.MethodDelete && op == "":
		if vm.Status == "running" {
			return nil, errorf(http.StatusInternalServerError, "VM %d is running - destroy failed", vmid)
		}
		vm.Lock = "destroyed"
		return s.newTask(node, "qmdestroy", vmid, func() { delete(s.vms, vmid) }), nil
	}
	return nil, errorf(http.StatusNotImplemented, "Method '%s /nodes/%s/qemu/%d/%s' not implemented", method, node, vmid, op)
}

func (s *Server) resources(typ string) []map[string]any {
	var out []map[string]any
	ids := slices.Sorted(maps.Keys(s.vms))
	for _, id := range ids {
		vm := s.vms[id]
		if typ != "" && typ != "vm" {
			continue
		}
		r := map[string]any{"id": fmt.Sprintf("qemu/%d", id), "type": "qemu", "vmid": id, "name": vm.Config["name"], "node": vm.Node, "status": vm.Status, "template": 0}
		if vm.Template {
			r["template"] = 1
		}
		out = append(out, r)
	}
	return out
}

func (s *Server) nextID(want string) (any, *apiError) {
	if want != "" {
		id, _ := strconv.Atoi(want)
		if _, taken := s.vms[id]; taken {
			return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: map[string]string{"vmid": fmt.Sprintf("VM %d already exists", id)}}
		}
		return want, nil
	}
	for id := 100; ; id++ {
		if _, taken := s.vms[id]; !taken {
			return strconv.Itoa(id), nil
		}
	}
}

func (s *Server) vmStatus(vm *VM) map[string]any {
	st := map[string]any{"vmid": vm.VMID, "name": vm.Config["name"], "status": vm.Status, "qmpstatus": vm.Status, "uptime": 0}
	if vm.Lock != "" {
		st["lock"] = vm.Lock
	}
	if vm.Template {
		st["template"] = 1
	}
	return st
}

// integerKeys are the configuration keys the API returns as JSON numbers.
var integerKeys = map[string]bool{"cores": true, "sockets": true, "memory": true, "balloon": true, "vcpus": true, "cpuunits": true, "template": true, "onboot": true, "numa": true, "kvm": true, "acpi": true, "tablet": true, "protection": true}

func vmConfig(vm *VM) map[string]any {
	out := map[string]any{"digest": fmt.Sprintf("%040x", len(vm.Config))}
	for k, v := range vm.Config {
		if i, err := strconv.Atoi(v); err == nil && integerKeys[k] {
			out[k] = i
			continue
		}
		out[k] = v
	}
	if vm.Lock != "" {
		out["lock"] = vm.Lock
	}
	return out
}

func (s *Server) clone(src *VM, form url.Values) (any, *apiError) {
	newid, err := strconv.Atoi(form.Get("newid"))
	if err != nil {
		return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: map[string]string{"newid": "property is missing and it is not optional"}}
	}
	if other, taken := s.vms[newid]; taken {
		return nil, errorf(http.StatusInternalServerError, "VM %d already exists on node '%s'", newid, other.Node)
	}
	target := form.Get("target")
	if target == "" {
		target = src.Node
	}
	if !slices.Contains(s.nodes, target) {
		return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: map[string]string{"target": fmt.Sprintf("no such cluster node '%s'", target)}}
	}
	cfg := maps.Clone(src.Config)
	delete(cfg, "template")
	if name := form.Get("name"); name != "" {
		cfg["name"] = name
	}
	storage := form.Get("storage")
	for k, v := range cfg {
		if !isDisk(k) {
			continue
		}
		vol, rest, _ := strings.Cut(v, ",")
		st, _, _ := strings.Cut(vol, ":")
		if storage != "" {
			st = storage
		}
		switch {
		case strings.HasSuffix(vol, "-cloudinit"):
			// A cloud-init drive is made anew for the clone, as Proxmox does.
			cfg[k] = fmt.Sprintf("%s:vm-%d-cloudinit,%s", st, newid, rest)
		case strings.Contains(v, "media=cdrom"):
		default:
			cfg[k] = fmt.Sprintf("%s:vm-%d-disk-%s,%s", st, newid, strings.TrimLeft(k, "abcdefghijklmnopqrstuvwxyz"), rest)
		}
	}
	vm := &VM{VMID: newid, Node: target, Status: "stopped", Lock: "clone", Config: cfg}
	s.vms[newid] = vm
	return s.newTaskOr(src.Node, "qmclone", src.VMID, func() { vm.Lock = "" }, func() { delete(s.vms, newid) }), nil
}

func isDisk(key string) bool {
	for _, p := range []string{"scsi", "virtio", "sata", "ide"} {
		if rest, ok := strings.CutPrefix(key, p); ok {
			if _, err := strconv.Atoi(rest); err == nil {
				return true
			}
		}
	}
	return false
}

func (s *Server) config(vm *VM, form url.Values, async bool) (any, *apiError) {
	bad := map[string]string{}
	for k := range form {
		switch {
		case k == "delete" || k == "digest":
		case k == "cpu" && form.Get(k) == "":
			bad[k] = "value may not be empty"
		case k == "cores" || k == "memory":
			if i, err := strconv.Atoi(form.Get(k)); err != nil || i < 1 {
				bad[k] = fmt.Sprintf("type check ('integer') failed - got '%s'", form.Get(k))
			}
		case k == "sshkeys":
			if _, err := url.PathUnescape(form.Get(k)); err != nil || strings.Contains(form.Get(k), "+") {
				bad[k] = "invalid format - invalid urlencoded string: " + form.Get(k)
			}
		}
	}
	if len(bad) > 0 {
		return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: bad}
	}
	apply := func() {
		for k, v := range form {
			switch k {
			case "digest":
			case "delete":
				for _, d := range strings.Split(v[0], ",") {
					delete(vm.Config, strings.TrimSpace(d))
				}
			default:
				vm.Config[k] = v[0]
			}
		}
	}
	if !async {
		apply()
		return nil, nil
	}
	return s.newTask(vm.Node, "qmconfig", vm.VMID, apply), nil
}

var sizeRE = regexp.MustCompile(`^(\+)?(\d+)([KMGT])?$`)

func (s *Server) resize(vm *VM, form url.Values) (any, *apiError) {
	disk := form.Get("disk")
	cur, ok := vm.Config[disk]
	if !ok {
		return nil, errorf(http.StatusInternalServerError, "disk '%s' does not exist", disk)
	}
	m := sizeRE.FindStringSubmatch(form.Get("size"))
	if m == nil {
		return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: map[string]string{"size": "value does not match the regex pattern"}}
	}
	have := diskGiB(cur)
	want, _ := strconv.Atoi(m[2])
	if m[3] != "G" && m[3] != "" {
		return nil, errorf(http.StatusInternalServerError, "the fake only resizes in G")
	}
	if m[1] == "+" {
		want += have
	}
	if want < have {
		return nil, errorf(http.StatusInternalServerError, "shrinking disks is not supported")
	}
	return s.newTask(vm.Node, "qmresize", vm.VMID, func() {
		vm.Config[disk] = regexp.MustCompile(`size=\d+[KMGT]?`).ReplaceAllString(cur, fmt.Sprintf("size=%dG", want))
	}), nil
}

// diskGiB is the size=…G of a disk's configuration.
func diskGiB(v string) int {
	m := regexp.MustCompile(`size=(\d+)G`).FindStringSubmatch(v)
	if m == nil {
		return 0
	}
	i, _ := strconv.Atoi(m[1])
	return i
}

func (s *Server) upload(node, storage string, form url.Values, up *upload) (any, *apiError) {
	if up == nil {
		return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: map[string]string{"filename": "property is missing and it is not optional"}}
	}
	name, data := up.name, up.data
	if storage != ISOStorage {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support content-type 'iso'", storage)
	}
	if form.Get("content") != "iso" {
		return nil, &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", params: map[string]string{"content": "value '" + form.Get("content") + "' does not have a value in the enumeration 'iso, vztmpl, import'"}}
	}
	// Proxmox's upload replaces a file of the same name.
	volid := storage + ":iso/" + name
	return s.newTask(node, "imgcopy", 0, func() { s.volumes[node+"/"+volid] = data }), nil
}

func (s *Server) deleteVolume(node, storage, volid string) (any, *apiError) {
	if !strings.HasPrefix(volid, storage+":") {
		volid = storage + ":" + volid
	}
	if _, ok := s.volumes[node+"/"+volid]; !ok {
		return nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", volid)
	}
	// Stricter than Proxmox, which unlinks an ISO a VM still uses: a test
	// then sees a cloud-init ISO deleted before it was detached.
	for _, vm := range s.vms {
		for k, v := range vm.Config {
			if vm.Node == node && (strings.HasPrefix(v, volid+",") || v == volid) {
				return nil, errorf(http.StatusInternalServerError, "volume '%s' is still used by VM %d (%s)", volid, vm.VMID, k)
			}
		}
	}
	return s.newTask(node, "imgdel", 0, func() { delete(s.volumes, node+"/"+volid) }), nil
}

// newTask starts a task that, once it ends with OK, has applied done.
func (s *Server) newTask(node, typ string, id int, done func()) string {
	return s.newTaskOr(node, typ, id, done, nil)
}

// newTaskOr is newTask with undo run when the task fails (FailNextTask).
func (s *Server) newTaskOr(node, typ string, id int, done, undo func()) string {
	s.seq++
	now := time.Now()
	idStr := ""
	if id > 0 {
		idStr = strconv.Itoa(id)
	}
	user, _, _ := strings.Cut(s.token, "!")
	upid := fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, 1000+s.seq, 5000+s.seq, now.Unix(), typ, idStr, user)
	t := &task{upid: upid, node: node, typ: typ, id: idStr, exit: "OK", done: done, start: now}
	if exit, ok := s.failNext[typ]; ok {
		delete(s.failNext, typ)
		t.exit = exit
		// "WARNINGS: n" is how Proxmox ends a task that did its work
		// and logged warnings: the effect happens.
		if !strings.HasPrefix(exit, "WARNINGS:") {
			t.done = undo
		}
	}
	s.tasks[upid] = t
	return upid
}

// taskStatus reports a task running on its first poll and stopped after;
// the task's effect happens when it stops.
func (s *Server) taskStatus(node, upid string) (any, *apiError) {
	t, ok := s.tasks[upid]
	if !ok || t.node != node {
		return nil, errorf(http.StatusInternalServerError, "no such task")
	}
	t.polls++
	st := map[string]any{"upid": t.upid, "node": t.node, "type": t.typ, "id": t.id, "user": "terraform@pve", "starttime": t.start.Unix(), "pid": 1000, "pstart": 5000}
	if t.polls < 2 {
		st["status"] = "running"
		return st, nil
	}
	if t.done != nil {
		t.done()
		t.done = nil
	}
	st["status"] = "stopped"
	st["exitstatus"] = t.exit
	st["endtime"] = time.Now().Unix()
	return st, nil
}

// TLSConfig is a client TLS configuration that trusts the server.
func (s *Server) TLSConfig() *tls.Config {
	return s.Client().Transport.(*http.Transport).TLSClientConfig
}
