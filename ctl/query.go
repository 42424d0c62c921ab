package ctl

import (
	"context"
	"flag"
	"io"
)

// newAPIFlagSet makes the flag set of a management API command with the
// connection flags registered on it.
func (a *app) newAPIFlagSet(name, synopsis string) (*flag.FlagSet, *connFlags) {
	fs := a.newFlagSet(name, synopsis)
	conn := &connFlags{}
	conn.register(fs, a.env)
	return fs, conn
}

// withClient dials the management API, runs do with a context bounded by
// --timeout, closes the connection and returns do's exit code.
func (a *app) withClient(ctx context.Context, conn *connFlags, do func(ctx context.Context, c *client) int) int {
	c, code, ok := a.dial(conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	return do(cctx, c)
}

// query describes a read-only management API command: flags and at most one
// positional argument, one call, and its answer printed as a table or, with
// --json, as JSON.
type query[T any] struct {
	name     string // flag set name, e.g. "model get"
	synopsis string // usage line after "llmgw ctl "
	arg      string // what the one positional argument is, e.g. "the model name"; "" when none
	jsonHelp string // help of --json

	// flags registers the command's own flags; nil when it has none.
	flags func(fs *flag.FlagSet)
	// doing says what the call does, for its error; the positional argument,
	// if any, follows it after a space.
	doing string
	// call makes the call; arg is the positional argument or "".
	call  func(ctx context.Context, c *client, arg string) (T, error)
	json  func(w io.Writer, v T) error
	table func(w io.Writer, v T) error
	// printing names the table step in its error; "writing output" when nil.
	printing func(arg string) string
}

// runQuery runs q with args: parse, dial, call, print. Bad usage exits 2,
// a failed call or output 1.
func runQuery[T any](ctx context.Context, a *app, args []string, q query[T]) int {
	fs, conn := a.newAPIFlagSet(q.name, q.synopsis)
	if q.flags != nil {
		q.flags(fs)
	}
	asJSON := fs.Bool("json", false, q.jsonHelp)
	want := 0
	if q.arg != "" {
		want = 1
	}
	pos, code, ok := a.parse(fs, args, want, q.arg)
	if !ok {
		return code
	}
	arg, doing := "", q.doing
	if want == 1 {
		arg = pos[0]
		doing += " " + arg
	}
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		v, err := q.call(ctx, c, arg)
		if err != nil {
			return a.rpcError(c, doing, err)
		}
		if *asJSON {
			if err := q.json(a.stdout, v); err != nil {
				return a.errorf("%v", err)
			}
			return exitOK
		}
		if err := q.table(a.stdout, v); err != nil {
			printing := "writing output"
			if q.printing != nil {
				printing = q.printing(arg)
			}
			return a.errorf("%s: %v", printing, err)
		}
		return exitOK
	})
}
