package store

import "testing"

func TestRebind(t *testing.T) {
	tests := []struct {
		name   string
		dollar bool
		in     string
		want   string
	}{
		{"sqlite unchanged", false, "SELECT a FROM t WHERE a = ? AND b = ?", "SELECT a FROM t WHERE a = ? AND b = ?"},
		{"postgres numbered", true, "SELECT a FROM t WHERE a = ? AND b = ?", "SELECT a FROM t WHERE a = $1 AND b = $2"},
		{"no placeholders", true, "SELECT 1", "SELECT 1"},
		{"literal question mark kept", true, "SELECT '?' FROM t WHERE a = ?", "SELECT '?' FROM t WHERE a = $1"},
		{"escaped quote in literal", true, "SELECT 'it''s ?' WHERE a = ?", "SELECT 'it''s ?' WHERE a = $1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := dialect{dollar: tt.dollar}
			if got := d.rebind(tt.in); got != tt.want {
				t.Errorf("rebind(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
