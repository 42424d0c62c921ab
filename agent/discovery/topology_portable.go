//go:build !nvml

package discovery

// ProbeTopology reads the NVLink topology of gpus. The portable build cannot
// (NVML needs cgo): it leaves every GPU's topology unknown and says why.
func ProbeTopology(gpus []GPU) (note string) {
	if len(gpus) == 0 {
		return ""
	}
	return TopologyUnknownPortable
}
