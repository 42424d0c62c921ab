package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/runtime/keys"
)

// credentials are the dev cluster's admin token and API key. They are kept
// in plain text in DIR/credentials.json (0600) so that a restart on the same
// directory prints the same ones; the store holds only their hashes. This is
// for development only.
type credentials struct {
	AdminToken string `json:"admin_token"`
	APIKey     string `json:"api_key"`
}

func ensureCredentials(ctx context.Context, dir string, admin *keys.Admin) (credentials, error) {
	path := filepath.Join(dir, "credentials.json")
	var c credentials
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &c); err != nil {
			return c, fmt.Errorf("reading %s: %w (delete it to create new credentials)", path, err)
		}
		tokOK, err := admin.AdminTokenUsable(ctx, c.AdminToken)
		if err != nil {
			return c, fmt.Errorf("checking the dev admin token of %s: %w", path, err)
		}
		keyOK, err := admin.APIKeyUsable(ctx, c.APIKey)
		if err != nil {
			return c, fmt.Errorf("checking the dev API key of %s: %w", path, err)
		}
		if tokOK && keyOK {
			return c, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("reading %s: %w", path, err)
	}
	tok, err := admin.CreateAdminToken(ctx, "llmgw dev")
	if err != nil {
		return c, fmt.Errorf("creating the dev admin token: %w", err)
	}
	key, err := admin.CreateAPIKey(ctx, "llmgw dev", nil)
	if err != nil {
		return c, fmt.Errorf("creating the dev API key: %w", err)
	}
	c = credentials{AdminToken: tok.Secret, APIKey: key.Secret}
	b, _ := json.MarshalIndent(c, "", "  ")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return c, fmt.Errorf("writing %s: %w", path, err)
	}
	return c, nil
}

func envLines(dir string, base int, c credentials) string {
	pkiDir := filepath.Join(dir, "pki")
	client := "http://127.0.0.1:" + strconv.Itoa(base)
	lines := []string{
		"export LLMGW_BASE_URL=" + client + "/v1",
		"export OPENAI_BASE_URL=" + client + "/v1",
		"export LLMGW_API_KEY=" + c.APIKey,
		"export OPENAI_API_KEY=" + c.APIKey,
		"export LLMGW_ENDPOINT=127.0.0.1:" + strconv.Itoa(base+1),
		"export LLMGW_TOKEN=" + c.AdminToken,
		"export LLMGW_CA_CERT=" + filepath.Join(pkiDir, "ca.pem"),
		"export LLMGW_CA_KEY=" + filepath.Join(pkiDir, "ca-key.pem"),
		"export LLMGW_MIRROR_URL=" + mirrorBytesURL(base),
	}
	return strings.Join(lines, "\n") + "\n"
}
