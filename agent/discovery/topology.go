package discovery

// The NVLink topology of a node's GPUs. NVML is its only source, and NVML's
// bindings need cgo, so only an agent built with the nvml tag reads it
// (topology_nvml.go, nvml.go); the portable build says it is unknown
// (topology_portable.go). Unknown is never reported as "no NVLink": a GPU
// whose NVLinkKnown is false has an empty NVLinkPeers because nobody looked.

// TopologyUnknownPortable is the reason the portable build gives.
const TopologyUnknownPortable = "NVLink topology unknown: this agent was built without the nvml tag (NVML needs cgo)"
