package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/api/managev1"
)

// maxPasswordRead bounds what is read as a password.
const maxPasswordRead = 4096

// cmdLogin trades an administrator's email and password for an admin token
// that expires (auth.login_ttl), and prints it as shell the caller can eval.
func (a *app) cmdLogin(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("login", "login --email E [--password-file F | --password -]")
	email := fs.String("email", "", "the administrator's email")
	passwordFile := fs.String("password-file", "", "read the password from the first line of this file")
	password := fs.String("password", "", `"-" reads the password from the first line of stdin (a password itself is refused here: it would show in the process list)`)
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	if strings.TrimSpace(*email) == "" {
		return a.usageErrorf(fs, "missing --email")
	}
	pw, code, ok := a.readPassword(fs, *email, *password, *passwordFile)
	if !ok {
		return code
	}
	conn.anonymous = true
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		resp, err := c.Login(ctx, &managev1.LoginRequest{Email: *email, Password: pw})
		if err != nil {
			switch st, _ := status.FromError(err); st.Code() {
			case codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted, codes.InvalidArgument, codes.Unimplemented:
				return a.errorf("logging in as %s: %s", *email, st.Message())
			}
			return a.rpcError(c, "logging in as "+*email, err)
		}
		expires := time.UnixMilli(resp.GetExpiresUnixMs()).UTC()
		fmt.Fprintf(a.stdout, "# logged in as %s (%s); token %s expires %s (in %s)\n", resp.GetEmail(), resp.GetUserId(),
			resp.GetTokenId(), expires.Format(time.RFC3339), expires.Sub(a.now()).Round(time.Minute))
		fmt.Fprintf(a.stdout, "export %s=%s\n", EnvToken, shellQuote(resp.GetToken()))
		// Flags given instead of the environment are carried over, so that
		// the next command reaches the same control plane.
		for _, v := range []struct{ env, val string }{{EnvEndpoint, conn.endpoint}, {EnvCACert, conn.caCert}} {
			if v.val != "" && v.val != a.env(v.env) {
				fmt.Fprintf(a.stdout, "export %s=%s\n", v.env, shellQuote(v.val))
			}
		}
		return exitOK
	})
}

// cmdLogout revokes the admin token in use, which must come from login.
func (a *app) cmdLogout(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("logout", "logout")
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		resp, err := c.Logout(ctx, &managev1.LogoutRequest{})
		if err != nil {
			if isCode(err, codes.FailedPrecondition) {
				return a.errorf("logging out: %s", status.Convert(err).Message())
			}
			return a.rpcError(c, "logging out", err)
		}
		fmt.Fprintf(a.stdout, "# logged out: token %s is revoked\nunset %s\n", resp.GetTokenId(), EnvToken)
		return exitOK
	})
}

// readPassword gets the password from --password-file, from stdin with
// --password -, or else from the terminal without echo when stdin is one.
func (a *app) readPassword(fs interface{ Name() string }, email, value, file string) (string, int, bool) {
	usage := func(format string, args ...any) (string, int, bool) {
		fmt.Fprintf(a.stderr, "%s: "+format+"\n", append([]any{fs.Name()}, args...)...)
		return "", exitUsage, false
	}
	var pw string
	switch {
	case value != "" && value != "-":
		return usage(`--password takes only "-" (read stdin): a password on the command line shows in the process list; use --password-file or "-"`)
	case value != "" && file != "":
		return usage("give --password - or --password-file, not both")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", a.errorf("reading --password-file: %v", err), false
		}
		pw, err = readLine(f)
		_ = f.Close()
		if err != nil {
			return "", a.errorf("reading --password-file %s: %v", file, err), false
		}
	case value == "-":
		line, err := readLine(a.stdin)
		if err != nil {
			return "", a.errorf("reading the password from stdin: %v", err), false
		}
		pw = line
	default:
		tty, ok := a.stdin.(*os.File)
		if !ok || !isTerminal(tty) {
			return usage("no password: stdin is not a terminal; pass --password-file FILE or --password - (and the password on stdin)")
		}
		fmt.Fprintf(a.stderr, "password for %s: ", email)
		line, err := readNoEcho(tty)
		if err != nil {
			return "", a.errorf("reading the password from the terminal: %v", err), false
		}
		pw = line
	}
	if pw == "" {
		return "", a.errorf("the password is empty"), false
	}
	return pw, exitOK, true
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and -_./:@=,+.
func shellQuote(s string) string {
	isSafe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@=,+", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !isSafe(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// readLine reads up to the first newline (dropped, with a carriage return
// before it) one byte at a time, so nothing after it is consumed. The
// line is never part of an error.
func readLine(r io.Reader) (string, error) {
	var b strings.Builder
	buf := make([]byte, 1)
	for b.Len() <= maxPasswordRead {
		n, err := r.Read(buf)
		if n == 1 {
			if buf[0] == '\n' {
				return strings.TrimSuffix(b.String(), "\r"), nil
			}
			b.WriteByte(buf[0])
		}
		if errors.Is(err, io.EOF) {
			return strings.TrimSuffix(b.String(), "\r"), nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("the line is longer than %d bytes", maxPasswordRead)
}
