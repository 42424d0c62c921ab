package ctl

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
)

// cmdScale changes a model's replica bounds without editing the rest of
// its definition: `scale MODEL N` runs exactly N replicas (scaling.min and
// scaling.max N; 0 stops the model), unless --max gives the upper bound;
// --min and --max set either bound (--min alone raises a lower max to it).
// Only models added through the API: one declared in server.yaml is read
// again on every start, so it is changed there.
func (a *app) cmdScale(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("scale", "scale MODEL [N] [--min N] [--max N]")
	minF := fs.String("min", "", "replicas always running (scaling.min)")
	maxF := fs.String("max", "", "most replicas under load (scaling.max)")
	pos, code, ok := a.parseRange(fs, args, 1, 2, "the model name")
	if !ok {
		return code
	}
	// count reads a replica count; what names where it came from.
	count := func(what, s string) (*int32, bool) {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			a.usageErrorf(fs, "%s %q is not a replica count (a whole number of at least 0)", what, s)
			return nil, false
		}
		n32 := int32(n)
		return &n32, true
	}
	var setMin, setMax *int32
	if len(pos) == 2 {
		if *minF != "" {
			return a.usageErrorf(fs, "give the count or --min, not both")
		}
		if setMin, ok = count("N", pos[1]); !ok {
			return exitUsage
		}
	}
	if *minF != "" {
		if setMin, ok = count("--min", *minF); !ok {
			return exitUsage
		}
	}
	if *maxF != "" {
		if setMax, ok = count("--max", *maxF); !ok {
			return exitUsage
		}
	}
	if len(pos) == 2 && setMax == nil {
		setMax = setMin // N replicas, no more under load
	}
	if setMin == nil && setMax == nil {
		return a.usageErrorf(fs, "missing the replica count: scale MODEL N, or --min/--max")
	}
	name := pos[0]
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		m, err := c.GetModel(ctx, &managev1.GetModelRequest{Name: name})
		if err != nil {
			return a.rpcError(c, "getting model "+name, err)
		}
		if m.GetOrigin() == "config" {
			return a.errorf("scaling model %s: it is declared in server.yaml, which is read again on every start; change scaling there", name)
		}
		def := cloneModel(m)
		sc := &managev1.Scaling{}
		if m.GetScaling() != nil {
			sc = proto.Clone(m.GetScaling()).(*managev1.Scaling)
		}
		if setMin != nil {
			sc.Min = *setMin
			if setMax == nil && sc.Max < sc.Min {
				sc.Max = sc.Min
			}
		}
		if setMax != nil {
			sc.Max = *setMax
		}
		if sc.Max < sc.Min {
			return a.errorf("scaling model %s: max %d is below min %d", name, sc.Max, sc.Min)
		}
		def.Scaling = sc
		// Only over the definition read above: an edit made in between is
		// not silently reverted.
		got, err := c.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: def, IfRevision: m.GetRevision()})
		if err != nil {
			if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "revision") {
				return a.errorf("scaling model %s: it was changed by someone else while this command ran (%s); nothing changed: run it again", name, status.Convert(err).Message())
			}
			return a.rpcError(c, "scaling model "+name, err)
		}
		what := fmt.Sprintf("%s kept running", plural(int(sc.Min), "replica"))
		switch {
		case sc.Min == 0 && sc.Max == 0:
			what = "not running"
		case sc.Min == 0:
			what = "loaded on demand"
		case sc.Max > sc.Min:
			what = "more replicas under load"
		}
		fmt.Fprintf(a.stdout, "scaled model %s: min %d, max %d (%s); watch with llmgw ctl models\n", got.GetName(), sc.Min, sc.Max, what)
		printWarnings(a.stdout, got.GetWarnings())
		return exitOK
	})
}
