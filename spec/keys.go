// The bearer secrets llmgw hands out are generated and hashed here: the bearer secrets llmgw hands out: API
// keys for the client API and admin tokens for the management API. Only the
// hash of a secret is ever stored; the plaintext is shown once, at creation.
//
// Both kinds of secret are 256 bits from crypto/rand, so a single SHA-256 is
// the right hash: there is nothing to brute-force, and a slow password hash
// (bcrypt, argon2) would only cost CPU on every request without adding
// security. Passwords chosen by people must never go through HashSecret.
package spec

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Prefixes that make a leaked secret recognisable to people and to secret
// scanners.
const (
	APIKeyPrefix     = "llmgw-"
	AdminTokenPrefix = "llmgwadm-"
)

// DisplayPrefixLen is how many characters of an API key (including
// APIKeyPrefix) are kept in clear as its display prefix, so that an operator
// can tell keys apart in listings without the store holding the key.
const DisplayPrefixLen = len(APIKeyPrefix) + 6

// randomBytes is the entropy in every generated secret: 256 bits.
const randomBytes = 32

// encoding is lowercase base32 without padding: copy-paste safe, no
// characters that shells or URLs treat specially.
var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewAPIKey returns a new random API key, its display prefix and its hash.
// Store prefix and hash; give plaintext to the user once.
func NewAPIKey() (plaintext, prefix, hash string) {
	plaintext = APIKeyPrefix + random()
	return plaintext, plaintext[:DisplayPrefixLen], HashSecret(plaintext)
}

// APIKeyLen is the length of every API key: APIKeyPrefix and 256 bits in
// unpadded base32.
var APIKeyLen = len(APIKeyPrefix) + encoding.EncodedLen(randomBytes)

// ParseAPIKey checks that s is shaped like a key NewAPIKey makes (the
// prefix, then exactly 52 characters of lowercase base32, which hold 256
// bits) and returns its display prefix and hash, as NewAPIKey does. It is how
// a secret a client generated itself is accepted. The error never quotes s.
func ParseAPIKey(s string) (prefix, hash string, err error) {
	body, ok := strings.CutPrefix(s, APIKeyPrefix)
	if !ok {
		return "", "", fmt.Errorf("an API key starts with %q", APIKeyPrefix)
	}
	if len(s) != APIKeyLen {
		return "", "", fmt.Errorf("an API key is %d characters long, this one has %d", APIKeyLen, len(s))
	}
	for _, c := range body {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return "", "", errors.New("an API key holds only lowercase letters and the digits 2-7 after its prefix")
		}
	}
	if _, err := encoding.DecodeString(body); err != nil {
		return "", "", errors.New("an API key's body is not valid base32")
	}
	return s[:DisplayPrefixLen], HashSecret(s), nil
}

// NewAdminToken returns a new random admin token and its hash.
func NewAdminToken() (plaintext, hash string) {
	plaintext = AdminTokenPrefix + random()
	return plaintext, HashSecret(plaintext)
}

// HashSecret returns the lowercase hex SHA-256 of s. It is meant for
// high-entropy machine-generated secrets only (see the package comment).
func HashSecret(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Equal reports whether a and b are equal in time that depends only on
// their lengths. Use it wherever a presented secret or hash is compared.
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Verify reports whether plaintext hashes to hash, comparing in constant time.
func Verify(plaintext, hash string) bool {
	return Equal(HashSecret(plaintext), strings.ToLower(hash))
}

// IsAPIKey reports whether s looks like an llmgw API key (by prefix only).
func IsAPIKey(s string) bool { return strings.HasPrefix(s, APIKeyPrefix) }

// IsAdminToken reports whether s looks like an llmgw admin token (by prefix
// only).
func IsAdminToken(s string) bool { return strings.HasPrefix(s, AdminTokenPrefix) }

func random() string {
	b := make([]byte, randomBytes)
	// crypto/rand.Read never returns an error on supported platforms (Go
	// 1.24+); it crashes the program instead of returning weak bytes.
	_, _ = rand.Read(b)
	return encoding.EncodeToString(b)
}
