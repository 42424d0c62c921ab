//go:build linux

package discovery

import "syscall"

func statfs(path string) (total, free uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	// Block counts are in fragment-size units; Frsize is 0 on very old kernels.
	size := uint64(st.Frsize)
	if size == 0 {
		size = uint64(st.Bsize)
	}
	return st.Blocks * size, st.Bavail * size, nil
}
