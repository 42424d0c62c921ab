package ctl

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/api/managev1"
)

// rolloutManage answers RolloutModel and CheckTools as the control plane
// does, for the model "coder" only.
type rolloutManage struct {
	*fakeManage
	tool *managev1.ToolCheck
	req  *managev1.CheckToolsRequest
}

func (f *rolloutManage) RolloutModel(_ context.Context, req *managev1.RolloutModelRequest) (*managev1.RolloutModelResponse, error) {
	if req.GetName() != "coder" {
		return nil, status.Errorf(codes.NotFound, "model %q is not in the catalog", req.GetName())
	}
	return &managev1.RolloutModelResponse{Replicas: []string{"r-1", "r-2"}}, nil
}

func (f *rolloutManage) CheckTools(_ context.Context, req *managev1.CheckToolsRequest) (*managev1.ToolCheck, error) {
	f.req = req
	return f.tool, nil
}

func TestRolloutAndToolCheck(t *testing.T) {
	f := &rolloutManage{fakeManage: cannedManage(), tool: &managev1.ToolCheck{Model: "coder", Replica: "r-1", Engine: "vllm", Verdict: "text",
		Detail: "the engine answered with the call as plain text", Content: "<tool_call>{...}", Fix: "--enable-auto-tool-choice --tool-call-parser hermes"}}
	env := startServer(t, f)

	code, out, errOut := runCtl(t, env, "rollout", "coder")
	if code != 0 || out != "model coder: replacing 2 stale replicas one at a time, each replacement ready first: r-1, r-2\nfollow it with: llmgw ctl replicas --model coder\n" {
		t.Errorf("rollout: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runCtl(t, env, "rollout", "nope"); code != 1 || !strings.Contains(errOut, `rolling out model nope: model "nope" is not in the catalog`) {
		t.Errorf("rollout of an unknown model: exit %d %s", code, errOut)
	}

	code, out, errOut = runCtl(t, env, "tool-check", "coder", "--extra", `{"max_tokens":512}`)
	want := "model coder, replica r-1 (vllm): text\nthe engine answered with the call as plain text\ncontent: <tool_call>{...}\nfix: add to the profile's args: --enable-auto-tool-choice --tool-call-parser hermes\n"
	if code != 1 || out != want || f.req.GetExtraBodyJson() != `{"max_tokens":512}` || f.req.GetTimeoutMs() != 60_000 {
		t.Errorf("tool-check: exit %d, asked %v\n got %q\nwant %q\n%s", code, f.req, out, want, errOut)
	}
	f.tool = &managev1.ToolCheck{Model: "coder", Replica: "r-1", Engine: "vllm", Verdict: "structured", Detail: "the engine answered with 1 structured tool call(s): get_weather({})"}
	if code, _, _ := runCtl(t, env, "tool-check", "coder"); code != 0 {
		t.Errorf("structured: exit %d, want 0", code)
	}
	if code, _, errOut := runCtl(t, env, "tool-check", "coder", "--extra", "[1]"); code != 2 || !strings.Contains(errOut, "--extra must be a JSON object") {
		t.Errorf("bad --extra: exit %d %s", code, errOut)
	}
}
