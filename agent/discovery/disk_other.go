//go:build !linux && !darwin

package discovery

import (
	"errors"
	"runtime"
)

func statfs(string) (total, free uint64, err error) {
	return 0, 0, errors.New("not supported on " + runtime.GOOS)
}
