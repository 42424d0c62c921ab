package manage

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/spec"
)

// FlagWarningPrefix starts every warning of the flag check, so that a
// client (the provider's plan) can tell it from the others.
const FlagWarningPrefix = "engine flags: "

// checkFlags looks up every flag each profile of m would put on its
// engine's command line (spec.LaunchFlags: the driver's and the profile's
// args) in the help that engine printed on each node (the agents' engine
// checks). A profile whose flags no checked node takes all of is refused,
// InvalidArgument naming the flags, the engine with its version, the help
// and each node. When only some nodes lack a flag, a warning says which
// nodes the profile will not be placed on; a node whose help could not be
// read in full is named in a warning too, since nothing was checked there.
// Nodes that declare no such engine, or whose engine failed its check, say
// nothing here (placement explains them).
func (s *Service) checkFlags(op string, m spec.Model) ([]string, error) {
	m = m.Clone()
	m.Normalize()
	nodes := s.opts.Fleet.Nodes()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	var refusals, warnings []string
	for _, p := range m.Profiles {
		r, w := profileFlags(p, nodes)
		refusals = append(refusals, r...)
		warnings = append(warnings, w...)
	}
	if len(refusals) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %s", op, strings.Join(refusals, "; "))
	}
	for _, w := range warnings {
		s.log.Warn("engine flags not taken or not checked", "model", m.Name, "warning", w)
	}
	return warnings, nil
}

// profileFlags is checkFlags for one profile.
func profileFlags(p spec.Profile, nodes []fleet.Node) (refusals, warnings []string) {
	var takes []string
	var lacks, unchecked []string
	for _, n := range nodes {
		for _, c := range n.EngineChecks {
			if c.GetEngine() != p.Engine || !c.GetOk() {
				continue
			}
			h, known := reconcile.EngineHelp(c)
			if !known {
				if w := c.GetHelpWarning(); w != "" {
					unchecked = append(unchecked, "node "+n.ID+": "+w)
				}
				continue
			}
			if missing, why := h.Missing(p); len(missing) > 0 {
				lacks = append(lacks, "on node "+n.ID+" "+why)
			} else {
				takes = append(takes, n.ID)
			}
		}
	}
	switch {
	case len(lacks) > 0 && len(takes) == 0:
		refusals = append(refusals, fmt.Sprintf("profile %q uses a flag its engine does not take: %s", p.Name, strings.Join(lacks, "; ")))
	case len(lacks) > 0:
		warnings = append(warnings, fmt.Sprintf("%sprofile %q will be placed only on %s: %s", FlagWarningPrefix, p.Name, strings.Join(takes, ", "), strings.Join(lacks, "; ")))
	}
	for _, u := range unchecked {
		warnings = append(warnings, fmt.Sprintf("%sprofile %q not checked on %s", FlagWarningPrefix, p.Name, u))
	}
	return refusals, warnings
}
