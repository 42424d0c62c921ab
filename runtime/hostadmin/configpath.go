package hostadmin

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// defaultConfigPaths are where `llmgw keys` and `llmgw users` look for
// server.yaml without -c: the current directory, then where an installation
// keeps it (docs/getting-started.md), so that `llmgw users promote EMAIL`
// works as the guides write it on the control-plane host.
var defaultConfigPaths = []string{"server.yaml", "/etc/llmgw/server.yaml"}

// configFlagHelp is the -c flag's help.
var configFlagHelp = "the control plane's configuration (for auth.store); default: " + strings.Join(defaultConfigPaths, ", else ")

// configPath is the configuration to read: -c when given, else the first
// of defaultConfigPaths that exists.
func configPath(fs *flag.FlagSet, given string) (string, error) {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "c" })
	if set {
		return given, nil
	}
	for _, p := range defaultConfigPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("reading %s: %w", p, err)
		}
	}
	return "", fmt.Errorf("no %s: pass -c with the control plane's server.yaml (its auth.store is the store to use)", strings.Join(defaultConfigPaths, " nor "))
}
