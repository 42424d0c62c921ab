package agent

import (
	"fmt"
	"strconv"

	"google.golang.org/grpc"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

// checkFencing reads the leader's fencing token from the session's header
// and refuses the session when it is below one this agent has seen: that
// control plane lost the lease and must not command the node. A control
// plane that sends no token (one on its own, before leases) is accepted.
func (a *Agent) checkFencing(stream grpc.ClientStream, addr string) error {
	md, err := stream.Header()
	if err != nil {
		return fmt.Errorf("reading the session header: %w", err)
	}
	v := md.Get(agentv1.MetadataFencingToken)
	if len(v) == 0 {
		return nil
	}
	token, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		return fmt.Errorf("control plane %s sent an unreadable fencing token %q", addr, v[0])
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if token < a.fencing {
		a.log.Error("refusing a deposed control plane", "server", addr, "token", token, "seen", a.fencing)
		return fmt.Errorf("control plane %s leads with fencing token %d, below %d already seen: it was deposed; its commands are refused", addr, token, a.fencing)
	}
	if token > a.fencing {
		a.log.Info("following leader", "server", addr, "token", token)
	}
	a.fencing = token
	return nil
}
