package agentv1

// gRPC metadata the control plane sets on an agent session when several
// control planes share a store.
const (
	// MetadataFencingToken, in the response header, is the leader's fencing
	// token (decimal). An agent never takes commands from a session whose
	// token is below one it has already seen: that control plane has been
	// deposed.
	MetadataFencingToken = "llmgw-fencing-token"
	// MetadataLeaderAddr, in the trailer of a refusal with code
	// FailedPrecondition, is the agent address (host:port) of the control
	// plane that leads; the agent dials it next.
	MetadataLeaderAddr = "llmgw-leader-agents"
)
