package hostadmin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodPassword = "correct horse battery"

// TestReadPassword: the password flags checked, then read. TestUsageErrors
// checks that Users reports a bad pair as a usage error.
func TestReadPassword(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte(goodPassword+"\r\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, value, file, stdin, want, wantErr string
	}{
		{name: "value", value: goodPassword, want: goodPassword},
		{name: "stdin", value: "-", stdin: goodPassword + "\n", want: goodPassword},
		{name: "file", file: file, want: goodPassword},
		{name: "both", value: "x", file: file, wantErr: "not both"},
		{name: "none", wantErr: "a password is required"},
		{name: "missing file", file: file + ".nope", wantErr: "reading --password-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// As Users does: the flags checked, then the password read.
			err := passwordFlags(tt.value, tt.file)
			var got string
			if err == nil {
				got, err = readPassword(tt.value, tt.file, strings.NewReader(tt.stdin))
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("readPassword = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
