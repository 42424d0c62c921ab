package provider

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/llmgw/llmgw/spec"
)

// durationValidator checks that a string parses as a Go duration ("90s",
// "5m", "1h30m"), positive unless allowZero.
type durationValidator struct {
	allowZero bool
}

func (v durationValidator) Description(context.Context) string {
	if v.allowZero {
		return "a duration such as 30s, 5m or 1h30m, not negative"
	}
	return "a positive duration such as 30s, 5m or 1h30m"
}

func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v durationValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if msg := v.check(req.ConfigValue.ValueString()); msg != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration", fmt.Sprintf("%s: %s.", req.Path, msg))
	}
}

// check returns what is wrong with s, or "".
func (v durationValidator) check(s string) string {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return fmt.Sprintf("cannot parse %q as a duration; write it like \"30s\", \"5m\" or \"1h30m\"", s)
	case d < 0:
		return fmt.Sprintf("%q is negative", s)
	case d == 0 && !v.allowZero:
		return fmt.Sprintf("%q must be positive", s)
	}
	return ""
}

// maxDefaultsToMin plans scaling.max as scaling.min when max is left out,
// as the control plane's Normalize does.
type maxDefaultsToMin struct{}

func (maxDefaultsToMin) Description(context.Context) string {
	return "defaults to scaling.min when not set"
}

func (m maxDefaultsToMin) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (maxDefaultsToMin) PlanModifyInt64(ctx context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if !req.ConfigValue.IsNull() {
		return
	}
	var lowest types.Int64
	if d := req.Plan.GetAttribute(ctx, req.Path.ParentPath().AtName("min"), &lowest); d.HasError() || lowest.IsUnknown() || lowest.IsNull() {
		return
	}
	resp.PlanValue = lowest
}

// durationSyntax checks only that a string parses as a Go duration; its
// range is spec's to check (modelProblems).
type durationSyntax struct{}

func (durationSyntax) Description(context.Context) string {
	return "a duration such as 30s, 5m or 1h30m"
}

func (v durationSyntax) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (durationSyntax) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := time.ParseDuration(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration",
			fmt.Sprintf("%s: cannot parse %q as a duration; write it like \"30s\", \"5m\" or \"1h30m\".", req.Path, req.ConfigValue.ValueString()))
	}
}

// modelProblems checks a configured llmgw_model with spec's rules, as the
// control plane checks a request: the definition is normalized (the
// defaults the schema plans for unset attributes) and validated. A value
// the configuration sets explicitly is also checked as written, since
// Normalize would otherwise hide it (nodes = 0, startup_timeout = "0s",
// scaling.max below scaling.min) and the control plane would store another
// value than the plan. A problem is left out while a value it depends on is
// unknown (the key itself, a list or object holding it, or a sibling in
// the same object); the control plane checks it at apply.
func modelProblems(cfg modelResourceModel) diag.Diagnostics {
	raw, r := cfg.read()
	normal := raw.Clone()
	normal.Normalize()
	var problems, asWritten spec.Problems
	errors.As(normal.Validate(), &problems)
	errors.As(raw.Validate(), &asWritten)
	seen := map[spec.Problem]bool{}
	for _, p := range problems {
		seen[p] = true
	}
	for _, p := range asWritten {
		if !seen[p] && r.set[p.Key] {
			problems = append(problems, p)
			seen[p] = true
		}
	}
	var diags diag.Diagnostics
	for _, p := range problems {
		if dependsOnUnknown(p.Key, r.unknown) || r.unparsed[p.Key] {
			continue
		}
		diags.AddAttributeError(problemPath(p.Key), "Invalid model definition: "+p.Key,
			fmt.Sprintf("%s: %s.\n\nThe control plane refuses a model that breaks this rule: change %s in the configuration.", p.Key, p.Msg, p.Key))
	}
	return diags
}

// dependsOnUnknown reports whether a problem at key may come from a value
// not known yet: key itself, a list or object that holds it, a value it
// holds, or, inside an object, a sibling (rules like tp with gpu_class
// relate the attributes of one object).
func dependsOnUnknown(key string, unknown []string) bool {
	parent := func(k string) string {
		if i := strings.LastIndex(k, "."); i >= 0 {
			return k[:i]
		}
		return ""
	}
	within := func(k, outer string) bool {
		return k == outer || strings.HasPrefix(k, outer+".") || strings.HasPrefix(k, outer+"[")
	}
	for _, u := range unknown {
		if within(key, u) || within(u, key) {
			return true
		}
		if p := parent(key); p != "" && !strings.HasSuffix(key, "]") && parent(u) == p {
			return true
		}
	}
	return false
}

// problemPath is the attribute path of a spec key: profiles[1].tp is
// profiles, element 1, attribute tp.
func problemPath(key string) path.Path {
	var p path.Path
	for i, seg := range strings.Split(key, ".") {
		name, rest, _ := strings.Cut(seg, "[")
		if i == 0 {
			p = path.Root(name)
		} else {
			p = p.AtName(name)
		}
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			n, err := strconv.Atoi(idx)
			if err != nil {
				break
			}
			p = p.AtListIndex(n)
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return p
}
