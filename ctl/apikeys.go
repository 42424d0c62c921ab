package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/llmgw/llmgw/api/managev1"
)

const keysUsage = `usage: llmgw ctl keys [list|create|update|revoke] ...
  keys [--project P] [--all] [--json]    list API keys (never their secrets; --all: revoked ones too)
  keys create NAME [--project P] [--expires 720h|2027-01-01] [--rpm N] [--tpm N] [--json]
                                         create a key; its secret is printed this once
  keys update ID [--rpm N] [--tpm N]     change the key's own limits (flags not given are kept)
  keys revoke ID                         stop the key working (within seconds)
`

func (a *app) cmdKeys(ctx context.Context, args []string) int {
	return a.listOrGroup("keys", keysUsage, args, func(args []string) int {
		var project string
		var all bool
		return runQuery(ctx, a, args, query[[]*managev1.ApiKey]{
			name: "keys", synopsis: "keys [--project P] [--all] [--json]", jsonHelp: "print the keys as a JSON array (snake_case keys)",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&project, "project", "", "only the keys of this project")
				fs.BoolVar(&all, "all", false, "list revoked keys too")
			},
			doing: "listing keys",
			call: func(ctx context.Context, c *client, _ string) ([]*managev1.ApiKey, error) {
				resp, err := c.ListApiKeys(ctx, &managev1.ListApiKeysRequest{Project: project, IncludeRevoked: all})
				return resp.GetKeys(), err
			},
			json: writeJSON[*managev1.ApiKey], table: func(w io.Writer, keys []*managev1.ApiKey) error { return writeKeys(w, keys, a.now()) },
		})
	}, map[string]func([]string) int{
		"create": func(args []string) int { return a.keyCreate(ctx, args) },
		"update": func(args []string) int { return a.keyUpdate(ctx, args) },
		"revoke": func(args []string) int { return a.keyRevoke(ctx, args) },
	})
}

func writeKeys(w io.Writer, keys []*managev1.ApiKey, now time.Time) error {
	tw := newTable(w)
	row(tw, "ID", "NAME", "PREFIX", "PROJECT", "RPM", "TPM", "EXPIRES", "LAST USED", "STATE")
	for _, k := range keys {
		state := "active"
		switch {
		case k.GetRevokedUnixMs() != 0:
			state = "revoked"
		case k.GetExpiresUnixMs() != 0 && !now.Before(time.UnixMilli(k.GetExpiresUnixMs())):
			state = "expired"
		}
		used := "never"
		if k.GetLastUsedUnixMs() != 0 {
			used = humanAgo(now, k.GetLastUsedUnixMs()) + " ago"
		}
		row(tw, k.GetId(), k.GetName(), k.GetPrefix()+"…", k.GetProject(), limitText(k.GetRpm()), limitText(k.GetTpm()),
			timeText(k.GetExpiresUnixMs()), used, state)
	}
	return tw.Flush()
}

// parseExpiry reads --expires: a lifetime ("720h", "30d") or a date or time
// ("2027-01-01", RFC 3339).
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if d, err := parseSpan(s); err == nil {
		return now.Add(d), nil
	}
	if t, err := parseDate(s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--expires %q: give a lifetime (720h, 30d), a date (2027-01-01) or an RFC 3339 time", s)
}

func (a *app) keyCreate(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("keys create", "keys create NAME [--project P] [--expires 720h|2027-01-01] [--rpm N] [--tpm N] [--json]")
	project := fs.String("project", "default", "the project the key belongs to")
	expires := fs.String("expires", "", "lifetime (720h, 30d) or expiry date (2027-01-01, RFC 3339); empty: never expires")
	rpm := fs.Int64("rpm", 0, "the key's own requests per minute (0: not set)")
	tpm := fs.Int64("tpm", 0, "the key's own tokens per minute (0: not set)")
	asJSON := fs.Bool("json", false, "print the key and its secret as JSON")
	pos, code, ok := a.parse(fs, args, 1, "the key name")
	if !ok {
		return code
	}
	k := &managev1.ApiKey{Name: pos[0], Project: *project, Rpm: *rpm, Tpm: *tpm}
	if *expires != "" {
		t, err := parseExpiry(*expires, a.now())
		if err != nil {
			return a.usageErrorf(fs, "%v", err)
		}
		k.ExpiresUnixMs = t.UnixMilli()
	}
	return mutation(ctx, a, fs, conn, asJSON, "creating key "+pos[0], func(ctx context.Context, c *client) (*managev1.CreateApiKeyResponse, error) {
		return c.CreateApiKey(ctx, &managev1.CreateApiKeyRequest{Key: k})
	}, func(w io.Writer, r *managev1.CreateApiKeyResponse) {
		k := r.GetKey()
		fmt.Fprintf(w, "created API key %s (%s) in project %s. This is the only time it is shown:\n\n  %s\n\n", k.GetId(), k.GetName(), k.GetProject(), r.GetSecret())
	})
}

func (a *app) keyUpdate(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("keys update", "keys update ID [--rpm N] [--tpm N] [--json]")
	rpm := fs.Int64("rpm", 0, "the key's own requests per minute (0: not set)")
	tpm := fs.Int64("tpm", 0, "the key's own tokens per minute (0: not set)")
	asJSON := fs.Bool("json", false, "print the key as JSON")
	pos, code, ok := a.parse(fs, args, 1, "the key id")
	if !ok {
		return code
	}
	return mutation(ctx, a, fs, conn, asJSON, "updating key "+pos[0], func(ctx context.Context, c *client) (*managev1.ApiKey, error) {
		cur, err := c.GetApiKey(ctx, &managev1.GetApiKeyRequest{Id: pos[0]})
		if err != nil {
			return nil, err
		}
		req := &managev1.UpdateApiKeyRequest{Id: pos[0], Rpm: cur.GetRpm(), Tpm: cur.GetTpm()}
		if isSet(fs, "rpm") {
			req.Rpm = *rpm
		}
		if isSet(fs, "tpm") {
			req.Tpm = *tpm
		}
		return c.UpdateApiKey(ctx, req)
	}, func(w io.Writer, k *managev1.ApiKey) {
		fmt.Fprintf(w, "key %s (%s): rpm %s, tpm %s\n", k.GetId(), k.GetName(), limitText(k.GetRpm()), limitText(k.GetTpm()))
	})
}

func (a *app) keyRevoke(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("keys revoke", "keys revoke ID [--json]")
	asJSON := fs.Bool("json", false, "print the revoked key as JSON")
	pos, code, ok := a.parse(fs, args, 1, "the key id")
	if !ok {
		return code
	}
	return mutation(ctx, a, fs, conn, asJSON, "revoking key "+pos[0], func(ctx context.Context, c *client) (*managev1.ApiKey, error) {
		return c.RevokeApiKey(ctx, &managev1.RevokeApiKeyRequest{Id: pos[0]})
	}, func(w io.Writer, k *managev1.ApiKey) {
		fmt.Fprintf(w, "revoked %s (%s); it stops working within seconds\n", k.GetId(), k.GetName())
	})
}
