package ctl

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
)

func TestDrain(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
		// wantReq is what the server was asked; nil when nothing reached it.
		wantReq *managev1.DrainNodeRequest
	}{
		{
			name:    "node with a replica",
			args:    []string{"drain", "llmgw-node02"},
			wantOut: "draining llmgw-node02: 1 replica to move; watch with llmgw ctl nodes\n",
			wantReq: &managev1.DrainNodeRequest{Name: "llmgw-node02"},
		},
		{
			name:    "node with no replicas",
			args:    []string{"drain", "llmgw-node01"},
			wantOut: "draining llmgw-node01: 0 replicas to move; watch with llmgw ctl nodes\n",
			wantReq: &managev1.DrainNodeRequest{Name: "llmgw-node01"},
		},
		{
			name:    "--cancel before the node",
			args:    []string{"drain", "--cancel", "llmgw-node02"},
			wantOut: "stopped draining llmgw-node02: it takes work again\n",
			wantReq: &managev1.DrainNodeRequest{Name: "llmgw-node02", Cancel: true},
		},
		{
			name:     "unknown node is the server's NotFound",
			args:     []string{"drain", "gpu-99"},
			wantCode: 1,
			wantErr:  "llmgw ctl: draining node gpu-99: node \"gpu-99\" not found\n",
		},
		{
			name:     "cancelling on an unknown node says so",
			args:     []string{"drain", "gpu-99", "--cancel"},
			wantCode: 1,
			wantErr:  "llmgw ctl: cancelling the drain of node gpu-99: node \"gpu-99\" not found\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cannedManage()
			env := startServer(t, f)
			code, out, errOut := runCtl(t, env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut)
			}
			if out != tt.wantOut {
				t.Errorf("stdout %q, want %q", out, tt.wantOut)
			}
			if errOut != tt.wantErr {
				t.Errorf("stderr %q, want %q", errOut, tt.wantErr)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			switch {
			case tt.wantReq == nil && len(f.drains) != 0:
				t.Errorf("server drained %v, want nothing", f.drains)
			case tt.wantReq != nil && (len(f.drains) != 1 || !proto.Equal(f.drains[0], tt.wantReq)):
				t.Errorf("server was asked %v, want [%v]", f.drains, tt.wantReq)
			}
		})
	}
}

// The server reports a draining node's state; ctl nodes shows it as sent.
func TestNodesShowDraining(t *testing.T) {
	f := cannedManage()
	f.nodes[1].State, f.nodes[1].Draining = "draining", true
	env := startServer(t, f)
	code, out, errOut := runCtl(t, env, "nodes")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "llmgw-node02  draining (undeclared)  6/8 free  1007G  -          h100-80g  ib-a(out),roce  1         1m\n"
	if !strings.Contains(out, want) {
		t.Errorf("stdout lacks %q:\n%s", want, out)
	}
}
