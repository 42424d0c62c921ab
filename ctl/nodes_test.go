package ctl

import (
	"testing"

	"github.com/llmgw/llmgw/api/managev1"
)

// The STATE column marks a node the control plane holds no declaration for
// (its agent brought its own file); the state itself is shown as sent.
func TestNodesMarkUndeclared(t *testing.T) {
	tests := []struct {
		name     string
		declared []bool // per canned node
		want     string
	}{
		{
			name:     "a declared and an undeclared node",
			declared: []bool{true, false, true},
			want: `NODE          STATE               GPUS      MEM    DISK       CLASSES   FABRICS         REPLICAS  LAST SEEN
llmgw-node01  ready               8/8 free  503G   120G/400G  h100-80g  ib-a            0         2s
llmgw-node02  ready (undeclared)  6/8 free  1007G  -          h100-80g  ib-a(out),roce  1         1m
cpu01         lost                -         62G    -          -         -               0         3h

llmgw-node02: fabric ib-a out of service: mlx5_1 port 1 is DOWN
cpu01: lost: no heartbeat since 3h
`,
		},
		{
			name:     "all declared",
			declared: []bool{true, true, true},
			want: `NODE          STATE  GPUS      MEM    DISK       CLASSES   FABRICS         REPLICAS  LAST SEEN
llmgw-node01  ready  8/8 free  503G   120G/400G  h100-80g  ib-a            0         2s
llmgw-node02  ready  6/8 free  1007G  -          h100-80g  ib-a(out),roce  1         1m
cpu01         lost   -         62G    -          -         -               0         3h

llmgw-node02: fabric ib-a out of service: mlx5_1 port 1 is DOWN
cpu01: lost: no heartbeat since 3h
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cannedManage()
			if len(f.nodes) != len(tt.declared) {
				t.Fatalf("%d canned nodes, test has %d", len(f.nodes), len(tt.declared))
			}
			for i, d := range tt.declared {
				f.nodes[i].Declared = d
			}
			env := startServer(t, f)
			code, out, errOut := runCtl(t, env, "nodes")
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if out != tt.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tt.want)
			}
		})
	}
}

func TestNodeState(t *testing.T) {
	tests := []struct {
		node *managev1.Node
		want string
	}{
		{&managev1.Node{State: "ready", Declared: true}, "ready"},
		{&managev1.Node{State: "ready"}, "ready (undeclared)"},
		{&managev1.Node{State: "pending"}, "pending (undeclared)"},
		{&managev1.Node{State: "draining", Declared: true}, "draining"},
		{&managev1.Node{Declared: true}, "-"},
		{&managev1.Node{}, "- (undeclared)"},
	}
	for _, tt := range tests {
		if got := nodeState(tt.node); got != tt.want {
			t.Errorf("nodeState(%v) = %q, want %q", tt.node, got, tt.want)
		}
	}
}
