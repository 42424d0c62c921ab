package ctl

import (
	"errors"
	"time"
)

// These are where the cert commands call the pki package.

var errNoPKI = errors.New("certificate issuing is not built into this binary yet")

func initCA(dir string, force bool) (certPath, keyPath string, err error) {
	return "", "", errNoPKI
}

func issueServer(caDir, name string, hosts []string, outDir string, validity time.Duration) (certPath, keyPath string, err error) {
	return "", "", errNoPKI
}

func issueNode(caDir, node, outDir string, validity time.Duration) (certPath, keyPath string, err error) {
	return "", "", errNoPKI
}
