// Package cliflags parses the command lines of llmgw's subcommands, where
// flags and positional arguments may come in any order.
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
