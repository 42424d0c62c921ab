// Package cliflags parses the command lines of llmgw's subcommands, where
// flags and positional arguments may come in any order.
//
// It is not github.com/spf13/pflag, whose interspersed parsing would do the
// same: pflag reads -json as the shorthands -j -s -o -n, so the single-dash
// flags that package flag accepts and that every usage text prints (-json,
// -c FILE, -help) would stop working.
package cliflags

import "flag"

// Parse parses flags and positional arguments given in any order
// (`explain-placement MODEL --json` and `explain-placement --json MODEL`
// alike) and returns the positionals. Everything after "--" is positional.
// It returns flag.ErrHelp for -h; other errors were already printed with
// the usage by the flag set.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
