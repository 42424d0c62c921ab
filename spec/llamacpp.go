package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultLlamaCppSlots is the number of parallel slots llama-server is given
// (--parallel) when a profile's args do not say; the llamacpp driver passes
// it.
const DefaultLlamaCppSlots = 1

// ArgValue returns the value of the last of names in args, written either
// "--flag value" or "--flag=value", and whether any was there. The engine
// drivers read a profile's args with it, and so does validation.
func ArgValue(args []string, names ...string) (string, bool) {
	val, found := "", false
	for i, a := range args {
		for _, n := range names {
			switch {
			case a == n:
				found = true
				val = ""
				if i+1 < len(args) {
					val = args[i+1]
				}
			case strings.HasPrefix(a, n+"="):
				found = true
				val = strings.TrimPrefix(a, n+"=")
			}
		}
	}
	return val, found
}

// checkLlamaCppContext refuses a llamacpp profile whose args give
// llama-server an explicit --ctx-size (-c) that, divided among its parallel
// slots (--parallel, -np; DefaultLlamaCppSlots otherwise), leaves each slot
// less than the model's context_length: llama.cpp splits the context pool
// between its slots, so a request the catalog accepts would not fit. Without
// an explicit --ctx-size the driver sizes it as context_length × slots. A
// unified KV cache (--kv-unified, -kvu) lets one slot use the whole pool;
// --ctx-size 0 (the model's own) and --kv-unified-per-slot are not checked.
func checkLlamaCppContext(ps *Problems, key string, p Profile, contextLength int) {
	if p.Engine != "llamacpp" || contextLength <= 0 {
		return
	}
	ctxArg, set := ArgValue(p.Args, "--ctx-size", "-c")
	if !set {
		return
	}
	key += ".args"
	ctx, err := strconv.Atoi(ctxArg)
	if err != nil || ctx < 0 {
		ps.add(key, fmt.Sprintf("--ctx-size %q is not a number of tokens", ctxArg))
		return
	}
	slots, over := DefaultLlamaCppSlots, fmt.Sprintf("llama-server's %d slot (no --parallel)", DefaultLlamaCppSlots)
	if v, set := ArgValue(p.Args, "--parallel", "-np"); set {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			ps.add(key, fmt.Sprintf("--parallel %q is not a positive number", v))
			return
		}
		slots, over = n, "--parallel "+strconv.Itoa(n)
	}
	if _, set := ArgValue(p.Args, "--kv-unified-per-slot"); set || ctx == 0 {
		return
	}
	perSlot := ctx / slots
	if kvUnified(p.Args) {
		perSlot, over = ctx, over+" with --kv-unified"
	}
	if perSlot < contextLength {
		ps.add(key, fmt.Sprintf("--ctx-size %d over %s gives each slot %d tokens, less than context_length %d", ctx, over, perSlot, contextLength))
	}
}

// kvUnified reports whether args leave llama-server with one KV cache
// shared by all slots: the last of --kv-unified / -kvu and --no-kv-unified /
// -no-kvu wins.
func kvUnified(args []string) bool {
	on := false
	for _, a := range args {
		switch a {
		case "--kv-unified", "-kvu":
			on = true
		case "--no-kv-unified", "-no-kvu":
			on = false
		}
	}
	return on
}
