package discovery

import "fmt"

// Disk is the space of the filesystem holding a path.
type Disk struct {
	// Path is the path that was measured; "" when the disk was not probed.
	Path       string
	TotalBytes uint64
	// FreeBytes is the space available to unprivileged users (f_bavail).
	FreeBytes uint64
}

// ProbeDisk measures the filesystem holding path.
func ProbeDisk(path string) (Disk, error) {
	total, free, err := statfs(path)
	if err != nil {
		return Disk{}, fmt.Errorf("measuring disk space of %s: %w", path, err)
	}
	return Disk{Path: path, TotalBytes: total, FreeBytes: free}, nil
}
