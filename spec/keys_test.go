package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
)

func TestNewAPIKey(t *testing.T) {
	seen := map[string]bool{}
	shape := regexp.MustCompile(`^llmgw-[a-z2-7]{52}$`)
	for range 100 {
		plain, prefix, hash := NewAPIKey()
		if !shape.MatchString(plain) {
			t.Fatalf("api key %q does not match %s", plain, shape)
		}
		if !strings.HasPrefix(plain, prefix) || len(prefix) != DisplayPrefixLen {
			t.Fatalf("prefix %q is not the first %d characters of the key", prefix, DisplayPrefixLen)
		}
		if hash != HashSecret(plain) || !Verify(plain, hash) {
			t.Fatalf("hash %q does not verify the key", hash)
		}
		if strings.Contains(hash, plain) {
			t.Fatal("hash contains the plaintext")
		}
		if seen[plain] {
			t.Fatalf("duplicate key %q", plain)
		}
		seen[plain] = true
		if !IsAPIKey(plain) || IsAdminToken(plain) {
			t.Fatalf("key %q misclassified", plain)
		}
	}
}

func TestNewAdminToken(t *testing.T) {
	plain, hash := NewAdminToken()
	if !strings.HasPrefix(plain, "llmgwadm-") || !IsAdminToken(plain) || IsAPIKey(plain) {
		t.Fatalf("admin token %q lacks its prefix or is misclassified", plain)
	}
	if !Verify(plain, hash) {
		t.Fatal("admin token hash does not verify")
	}
	other, _ := NewAdminToken()
	if Verify(other, hash) {
		t.Fatal("a different token verified against the hash")
	}
}

func TestHashSecret(t *testing.T) {
	sum := sha256.Sum256([]byte("abc"))
	tests := []struct {
		in, want string
	}{
		{"abc", hex.EncodeToString(sum[:])},
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	}
	for _, tt := range tests {
		if got := HashSecret(tt.in); got != tt.want {
			t.Errorf("HashSecret(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSecretEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"", "", true},
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"abc", "abcd", false},
		{"", "a", false},
	}
	for _, tt := range tests {
		if got := Equal(tt.a, tt.b); got != tt.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestParseAPIKey(t *testing.T) {
	good, prefix, hash := NewAPIKey()
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"generated key", good, ""},
		{"admin token", "llmgwadm-" + good[6:], `starts with "llmgw-"`},
		{"no prefix", good[6:], `starts with "llmgw-"`},
		{"short", good[:20], "58 characters long, this one has 20"},
		{"long", good + "a", "this one has 59"},
		{"uppercase", "llmgw-" + strings.ToUpper(good[6:]), "lowercase letters and the digits 2-7"},
		{"digit 1", "llmgw-1" + good[7:], "lowercase letters and the digits 2-7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, h, err := ParseAPIKey(tt.in)
			if tt.wantErr == "" {
				if err != nil || p != prefix || h != hash {
					t.Fatalf("ParseAPIKey = %q, %q, %v; want %q, %q", p, h, err, prefix, hash)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to say %q", err, tt.wantErr)
			}
			if len(tt.in) > 10 && strings.Contains(err.Error(), tt.in[6:]) {
				t.Fatalf("error %q quotes the secret", err)
			}
		})
	}
}
