package hostadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmgw/llmgw/internal/cliflags"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/users"
)

const usersUsage = `usage: llmgw users <create|list|promote|demote> [-c server.yaml] ...
  users create EMAIL (--password - | --password-file F | --password P) [--admin]
                                                   create a user; "-" reads the password from stdin
  users list [--json]                              list users (never passwords)
  users promote ID|EMAIL                           make a user an administrator
  users demote ID|EMAIL                            take administration away and revoke the user's login tokens

run "llmgw users <command> -h" for its flags`

// usersSynopses are how each users command is called.
var usersSynopses = map[string]string{
	"create":  "llmgw users create EMAIL (--password - | --password-file F | --password P) [--admin] [-c server.yaml]",
	"list":    "llmgw users list [--json] [-c server.yaml]",
	"promote": "llmgw users promote ID|EMAIL [-c server.yaml]",
	"demote":  "llmgw users demote ID|EMAIL [-c server.yaml]",
}

// Users runs `llmgw users`: administrators, made directly in the store. It
// returns the exit code.
func Users(ctx context.Context, args []string, io IO) int {
	if len(args) == 0 {
		fmt.Fprintln(io.Err, usersUsage)
		return 2
	}
	sub := args[0]
	switch sub {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(io.Err, usersUsage)
		return 0
	}
	synopsis, ok := usersSynopses[sub]
	if !ok {
		fmt.Fprintf(io.Err, "llmgw users: unknown command %q\n", sub)
		fmt.Fprintln(io.Err, usersUsage)
		return 2
	}
	fs := cliflags.New("llmgw users "+sub, synopsis, io.Err)
	cfgPath := fs.String("c", "", configFlagHelp)
	password, passwordFile, admin, asJSON := new(string), new(string), new(bool), new(bool)
	switch sub {
	case "create":
		password = fs.String("password", "", `the password; "-" reads it from stdin (prefer --password-file or "-": a value shows in the process list)`)
		passwordFile = fs.String("password-file", "", "read the password from the first line of this file")
		admin = fs.Bool("admin", false, "create the user as an administrator")
	case "list":
		asJSON = fs.Bool("json", false, "print JSON")
	}
	want := 1
	if sub == "list" {
		want = 0
	}
	pos, err := cliflags.ParseN(fs, args[1:], want, "the user")
	if err != nil {
		return cliflags.ExitCode(err)
	}
	if sub == "create" {
		if err := passwordFlags(*password, *passwordFile); err != nil {
			return usageError(fs, "%v", err)
		}
	}
	path, err := configPath(fs, *cfgPath)
	if err != nil {
		return io.fail("users", err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return io.fail("users", err)
	}
	dsn := cfg.Auth.Store
	var pw string
	if sub == "create" {
		// Read the password before opening the store, so a bad flag fails fast.
		if pw, err = readPassword(*password, *passwordFile, io.In); err != nil {
			return io.fail("users create", err)
		}
	}
	a, err := users.Open(ctx, dsn)
	if err != nil {
		return io.fail("users", err)
	}
	defer a.Close()
	switch sub {
	case "create":
		u, err := a.Create(ctx, pos[0], pw, *admin)
		if err != nil {
			return io.fail("users create", err)
		}
		fmt.Fprintf(io.Out, "created user %s (%s)%s\n", u.ID, u.Email, adminNote(u))
	case "list":
		list, err := a.List(ctx)
		if err != nil {
			return io.fail("users list", err)
		}
		if *asJSON {
			type userJSON struct {
				ID        string    `json:"id"`
				Email     string    `json:"email"`
				Admin     bool      `json:"admin"`
				CreatedAt time.Time `json:"created_at"`
			}
			out := make([]userJSON, 0, len(list))
			for _, u := range list {
				out = append(out, userJSON{u.ID, u.Email, u.Admin, u.CreatedAt})
			}
			enc := json.NewEncoder(io.Out)
			enc.SetIndent("", "  ")
			_ = enc.Encode(out)
			return 0
		}
		tw := tabwriter.NewWriter(io.Out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tEMAIL\tADMIN\tCREATED")
		for _, u := range list {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\n", u.ID, u.Email, u.Admin, u.CreatedAt.Format(time.RFC3339))
		}
		_ = tw.Flush()
	case "promote", "demote":
		u, err := a.SetAdmin(ctx, pos[0], sub == "promote")
		if err != nil {
			return io.fail("users "+sub, err)
		}
		note := ""
		if sub == "demote" {
			note = "; its login tokens are revoked"
		}
		fmt.Fprintf(io.Out, "%s (%s)%s%s\n", u.ID, u.Email, adminNote(u), note)
	}
	return 0
}

func adminNote(u store.User) string {
	if u.Admin {
		return " is an administrator"
	}
	return " is not an administrator"
}

// passwordFlags checks that exactly one of --password (value) and
// --password-file (file) is given.
func passwordFlags(value, file string) error {
	switch {
	case value != "" && file != "":
		return errors.New("give --password or --password-file, not both")
	case value == "" && file == "":
		return errors.New("a password is required: --password-file FILE, --password - (read from stdin) or --password VALUE")
	}
	return nil
}

// readPassword returns the password given on the command line: value itself,
// or when value is "-" the first line of stdin, or the first line of file
// when file is set. passwordFlags has checked that exactly one of value and
// file is set. The trailing newline is dropped; the password is never part
// of an error.
func readPassword(value, file string, stdin io.Reader) (string, error) {
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("reading --password-file: %w", err)
		}
		return firstLine(string(b)), nil
	case value == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, 4096))
		if err != nil {
			return "", fmt.Errorf("reading the password from stdin: %w", err)
		}
		return firstLine(string(b)), nil
	}
	return value, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSuffix(line, "\r")
}
