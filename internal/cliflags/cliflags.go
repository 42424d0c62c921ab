// Package cliflags parses the command lines of llmgw's subcommands, where
// flags and positional arguments may come in any order.
//
// It is not github.com/spf13/pflag, whose interspersed parsing would do the
// same: pflag reads -json as the shorthands -j -s -o -n, so the single-dash
// flags that package flag accepts and that every usage text prints (-json,
// -c FILE, -help) would stop working.
package cliflags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

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

// New returns the flag set of one command. name is the whole command
// ("llmgw keys create"), which begins every error found after parsing
// (ParseRange, UsageErrorf, Required). It writes to out, continues on
// error, and its usage is "usage: " and synopsis (how the command is
// called), then every flag with its default: what -h prints, and what
// follows the error for an unknown or malformed flag.
func New(name, synopsis string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: %s\n", synopsis)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// ExitCode is the exit code for an error from Parse or fs.Parse, which the
// flag set has already printed with its usage: 0 for -h and --help, 2 for
// a bad flag.
func ExitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// ParseNoArgs parses a command that takes flags only, in any order; a
// positional argument is an error, printed with the usage as a bad flag
// is.
func ParseNoArgs(fs *flag.FlagSet, args []string) error {
	_, err := ParseN(fs, args, 0, "")
	return err
}

// ParseN parses a command that takes exactly n positional arguments, what
// naming them for the error when some are missing; a wrong count is an
// error printed with the usage, as a bad flag is.
func ParseN(fs *flag.FlagSet, args []string, n int, what string) ([]string, error) {
	return ParseRange(fs, args, n, n, what)
}

// ParseRange is ParseN for a command that takes from least to most
// positional arguments (`scale MODEL [N]`: 1 to 2). Fewer than least is
// "missing " and what; more than most names the first one too many; both
// are reported as UsageErrorf reports, after the command's name.
func ParseRange(fs *flag.FlagSet, args []string, least, most int, what string) ([]string, error) {
	pos, err := Parse(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pos) < least:
		err = fmt.Errorf("missing %s", what)
	case len(pos) > most:
		err = fmt.Errorf("unexpected argument %q", pos[most])
	default:
		return pos, nil
	}
	return nil, UsageErrorf(fs, "%v", err)
}

// UsageErrorf reports bad input the flag set cannot see for itself (a
// required flag missing, flags that exclude each other, a value out of
// range) as a bad flag is reported: the command's name ("llmgw keys
// create: ") and the message on one line, then the usage. It returns the
// error, whose ExitCode is 2. Check such input before reading any file, so
// the report comes first.
func UsageErrorf(fs *flag.FlagSet, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
	fs.Usage()
	return err
}

// Required reports the string flags among names (without dashes: "model")
// left empty, all of them in one usage error as UsageErrorf reports it:
// "--model is required", "--model and --version are required". It returns
// nil when every one is set. A name that is not a string flag of fs is the
// caller's mistake and panics, naming it.
func Required(fs *flag.FlagSet, names ...string) error {
	var missing []string
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			panic(fmt.Sprintf("cliflags.Required: %s has no flag --%s", fs.Name(), name))
		}
		if g, ok := f.Value.(flag.Getter); !ok {
			panic(fmt.Sprintf("cliflags.Required: --%s of %s is not a string flag", name, fs.Name()))
		} else if _, ok := g.Get().(string); !ok {
			panic(fmt.Sprintf("cliflags.Required: --%s of %s is not a string flag", name, fs.Name()))
		}
		if f.Value.String() == "" {
			missing = append(missing, "--"+name)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return UsageErrorf(fs, "%s is required", missing[0])
	}
	last := len(missing) - 1
	return UsageErrorf(fs, "%s and %s are required", strings.Join(missing[:last], ", "), missing[last])
}
