package ctl

import (
	"testing"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/managev1"
)

func TestCheckEngines(t *testing.T) {
	libgomp := "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"
	tests := []struct {
		name     string
		args     []string
		checks   []*agentv1.EngineCheck
		reason   string
		wantCode int
		wantOut  string
		wantErr  string
		// wantReq is what the server was asked; nil when nothing reached it.
		wantReq *managev1.CheckNodeEnginesRequest
	}{
		{
			name: "engine fixed",
			args: []string{"check-engines", "llmgw-node01"},
			checks: []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/opt/llama-server", Ok: true, Version: "version: 4567",
				Flags: []string{"--host", "--port"}, HelpCommand: "llama-server --help"}, {Engine: "sim", Path: "/usr/local/bin/llmgw", Ok: true}},
			wantOut: "ENGINE    RESULT  PATH                  FLAGS  DETAIL\nllamacpp  ok      /opt/llama-server     2      version: 4567\nsim       ok      /usr/local/bin/llmgw  -      \n" +
				"llamacpp: flags read from `llama-server --help`\nnode llmgw-node01 is ready\n",
			wantReq: &managev1.CheckNodeEnginesRequest{Name: "llmgw-node01", TimeoutMs: 60_000},
		},
		{
			name:     "engine still broken exits 1",
			args:     []string{"check-engines", "llmgw-node01", "--wait", "2m"},
			checks:   []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/opt/llama-server", Error: libgomp}},
			reason:   libgomp,
			wantCode: 1,
			wantOut:  "ENGINE    RESULT  PATH               FLAGS  DETAIL\nllamacpp  FAILED  /opt/llama-server  -      " + libgomp + "\nnode llmgw-node01 is ready: " + libgomp + "\n",
			wantErr:  "llmgw ctl: node llmgw-node01: 1 engine cannot start\n",
			wantReq:  &managev1.CheckNodeEnginesRequest{Name: "llmgw-node01", TimeoutMs: 120_000},
		},
		{
			name: "summary help: flags not checked, said so",
			args: []string{"check-engines", "llmgw-node01"},
			checks: []*agentv1.EngineCheck{{Engine: "vllm", Path: "/opt/venvs/vllm/bin/vllm", Ok: true, Version: "0.30.0", HelpCommand: "vllm serve --help",
				HelpWarning: "`vllm serve --help` printed only a summary that lists no flag; flags not checked on this node"}},
			wantOut: "ENGINE  RESULT  PATH                      FLAGS        DETAIL\nvllm    ok      /opt/venvs/vllm/bin/vllm  not checked  0.30.0\n" +
				"vllm: `vllm serve --help` printed only a summary that lists no flag; flags not checked on this node\nnode llmgw-node01 is ready\n",
			wantReq: &managev1.CheckNodeEnginesRequest{Name: "llmgw-node01", TimeoutMs: 60_000},
		},
		{
			name:     "node not connected is the server's NotFound",
			args:     []string{"check-engines", "gpu-99"},
			wantCode: 1,
			wantErr:  "llmgw ctl: checking the engines of node gpu-99: node \"gpu-99\" is not connected\n",
		},
		{
			name:     "without a node",
			args:     []string{"check-engines"},
			wantCode: 2,
			wantErr:  "llmgw ctl check-engines: missing the node name\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cannedManage()
			f.nodes[0].EngineChecks, f.nodes[0].Reason = tt.checks, tt.reason
			env := startServer(t, f)
			code, out, errOut := runCtl(t, env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut)
			}
			if out != tt.wantOut {
				t.Errorf("stdout %q, want %q", out, tt.wantOut)
			}
			if tt.wantCode == 2 {
				if len(errOut) < len(tt.wantErr) || errOut[:len(tt.wantErr)] != tt.wantErr {
					t.Errorf("stderr %q, want it to start with %q", errOut, tt.wantErr)
				}
			} else if errOut != tt.wantErr {
				t.Errorf("stderr %q, want %q", errOut, tt.wantErr)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			switch {
			case tt.wantReq == nil && len(f.checks) != 0:
				t.Errorf("server was asked %v, want nothing", f.checks)
			case tt.wantReq != nil && (len(f.checks) != 1 || !proto.Equal(f.checks[0], tt.wantReq)):
				t.Errorf("server was asked %v, want [%v]", f.checks, tt.wantReq)
			}
		})
	}
}
