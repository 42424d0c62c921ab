package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api/managev1"
)

// cmdToolCheck has the control plane send one ready replica of a model a
// chat request with a tool and prints whether the engine answered with
// structured tool_calls, with the call as plain text (its parser does not
// read the model's format) or refused the tools, and the engine flag that
// fixes it. It exits 1 for text and refused, 3 when the answer held no
// call at all (nothing to tell).
func (a *app) cmdToolCheck(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("tool-check", "tool-check MODEL [--extra JSON] [--wait 60s] [--json]")
	extra := fs.String("extra", "", "a JSON object merged into the request body, e.g. '{\"max_tokens\":512}'")
	wait := fs.Duration("wait", 60*time.Second, "how long the engine may take to answer")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, code, ok := a.parse(fs, args, 1, "the model name")
	if !ok {
		return code
	}
	if *wait <= 0 {
		return a.usageErrorf(fs, "--wait must be positive, got %s", *wait)
	}
	if *extra != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(*extra), &obj); err != nil {
			return a.usageErrorf(fs, "--extra must be a JSON object: %v", err)
		}
	}
	c, code, ok := a.dial(conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := context.WithTimeout(ctx, *wait+c.timeout)
	defer cancel()
	res, err := c.CheckTools(cctx, &managev1.CheckToolsRequest{Model: pos[0], ExtraBodyJson: *extra, TimeoutMs: wait.Milliseconds()})
	if err != nil {
		return a.rpcError(c, "checking the tool calls of model "+pos[0], err)
	}
	if *asJSON {
		if err := writeJSONOne(a.stdout, res); err != nil {
			return a.errorf("writing JSON: %v", err)
		}
	} else {
		fmt.Fprintf(a.stdout, "model %s, replica %s (%s): %s\n", res.GetModel(), res.GetReplica(), res.GetEngine(), res.GetVerdict())
		fmt.Fprintln(a.stdout, res.GetDetail())
		if res.GetContent() != "" && res.GetVerdict() != "structured" {
			fmt.Fprintf(a.stdout, "content: %s\n", res.GetContent())
		}
		if res.GetFix() != "" {
			fmt.Fprintf(a.stdout, "fix: add to the profile's args: %s\n", res.GetFix())
		}
	}
	switch res.GetVerdict() {
	case "structured":
		return exitOK
	case "no_call":
		return 3
	}
	return exitError
}
