package hostadmin

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/llmgw/llmgw/internal/cliflags"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/store"
)

const keysUsage = `usage: llmgw keys <create|list|revoke|admin-token|move-store|threads|memory> [-c server.yaml] ...
  keys create --name N [--expires 720h]   create an API key; it is printed once
  keys list [--json]                     list keys (never the secrets)
  keys revoke ID                         revoke a key
  keys admin-token --name N              create a management API token; printed once
  keys move-store --from DSN --to DSN    copy the whole store into a new, empty one
  keys threads --project P --retain-hours N | --off
                                         keep a project's conversations (threads, stored responses)
  keys memory --project P --retain-hours N | --off
                                         keep a project's agents' memory notes

run "llmgw keys <command> -h" for its flags`

// keysSynopses are how each of the key commands that read server.yaml is
// called.
var keysSynopses = map[string]string{
	"create":      "llmgw keys create --name N [--expires 720h] [-c server.yaml]",
	"list":        "llmgw keys list [--json] [-c server.yaml]",
	"revoke":      "llmgw keys revoke ID [-c server.yaml]",
	"admin-token": "llmgw keys admin-token --name N [-c server.yaml]",
}

// Keys runs `llmgw keys`: API keys and admin tokens, made directly in the
// store, and moving a whole store. It returns the exit code.
func Keys(ctx context.Context, args []string, io IO) int {
	if len(args) == 0 {
		fmt.Fprintln(io.Err, keysUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(io.Err, keysUsage)
		return 0
	case "move-store":
		return moveStore(ctx, args[1:], io)
	case "threads", "memory":
		return contentRetention(ctx, sub, args[1:], io)
	}
	synopsis, ok := keysSynopses[sub]
	if !ok {
		fmt.Fprintf(io.Err, "llmgw keys: unknown command %q\n", sub)
		fmt.Fprintln(io.Err, keysUsage)
		return 2
	}
	fs := cliflags.New("llmgw keys "+sub, synopsis, io.Err)
	cfgPath := fs.String("c", "", configFlagHelp)
	name, expires, asJSON := new(string), new(time.Duration), new(bool)
	switch sub {
	case "create":
		name = fs.String("name", "", "a name to recognise the key by")
		expires = fs.Duration("expires", 0, "lifetime of the key (e.g. 720h); 0 never expires")
	case "admin-token":
		name = fs.String("name", "", "a name to recognise the token by")
	case "list":
		asJSON = fs.Bool("json", false, "print JSON")
	}
	want := 0
	if sub == "revoke" {
		want = 1
	}
	pos, err := cliflags.ParseN(fs, args[1:], want, "the key id")
	if err != nil {
		return cliflags.ExitCode(err)
	}
	if sub == "create" || sub == "admin-token" {
		if err := cliflags.Required(fs, "name"); err != nil {
			return cliflags.ExitCode(err)
		}
		if *expires < 0 {
			return usageError(fs, "--expires %s is negative; 0 never expires", *expires)
		}
	}
	path, err := configPath(fs, *cfgPath)
	if err != nil {
		return io.fail("keys", err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return io.fail("keys", err)
	}
	admin, err := keys.Open(ctx, cfg.Auth.Store)
	if err != nil {
		return io.fail("keys", fmt.Errorf("auth.store: %w", err))
	}
	defer admin.Close()
	switch sub {
	case "create":
		var exp *time.Time
		if *expires > 0 {
			t := time.Now().Add(*expires)
			exp = &t
		}
		k, err := admin.CreateAPIKey(ctx, *name, exp)
		if err != nil {
			return io.fail("keys create", err)
		}
		fmt.Fprintf(io.Out, "created API key %s (%s). This is the only time it is shown:\n\n  %s\n\n", k.ID, k.Name, k.Secret)
	case "admin-token":
		t, err := admin.CreateAdminToken(ctx, *name)
		if err != nil {
			return io.fail("keys admin-token", err)
		}
		fmt.Fprintf(io.Out, "created admin token %s (%s). This is the only time it is shown:\n\n  %s\n\n", t.ID, t.Name, t.Secret)
	case "list":
		list, err := admin.ListAPIKeys(ctx)
		if err != nil {
			return io.fail("keys list", err)
		}
		if *asJSON {
			enc := json.NewEncoder(io.Out)
			enc.SetIndent("", "  ")
			_ = enc.Encode(list)
			return 0
		}
		tw := tabwriter.NewWriter(io.Out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tPROJECT\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
		for _, k := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Prefix, k.Project, k.CreatedAt.Format(time.RFC3339), fmtTime(k.ExpiresAt), fmtTime(k.LastUsedAt), fmtTime(k.RevokedAt))
		}
		_ = tw.Flush()
	case "revoke":
		if err := admin.RevokeAPIKey(ctx, pos[0]); err != nil {
			return io.fail("keys revoke", err)
		}
		fmt.Fprintf(io.Out, "revoked %s; it stops working within seconds\n", pos[0])
	}
	return 0
}

// moveStore copies a whole installation (keys, tokens, models, nodes,
// projects, usage) from one store into a new one, such as SQLite into
// PostgreSQL. It needs no server.yaml: both stores are named on the command
// line, "@file" forms included.
func moveStore(ctx context.Context, args []string, io IO) int {
	fs := cliflags.New("llmgw keys move-store", "llmgw keys move-store --from DSN --to DSN", io.Err)
	from := fs.String("from", "", "the store to copy, with the control plane stopped: a SQLite path, a postgres:// URL or @file; left untouched")
	to := fs.String("to", "", "the new, empty store to copy into (same forms)")
	if err := cliflags.ParseNoArgs(fs, args); err != nil {
		return cliflags.ExitCode(err)
	}
	if err := cliflags.Required(fs, "from", "to"); err != nil {
		return cliflags.ExitCode(err)
	}
	counts, err := store.Move(ctx, *from, *to)
	if err != nil {
		return io.fail("keys move-store", err)
	}
	tw := tabwriter.NewWriter(io.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS")
	for _, c := range counts {
		fmt.Fprintf(tw, "%s\t%d\n", c.Table, c.Rows)
	}
	_ = tw.Flush()
	fmt.Fprintln(io.Out, "copied; point auth.store at the new store and start the control plane")
	return 0
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}
