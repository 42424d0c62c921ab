package spec

import (
	"fmt"
	"strings"
	"time"
)

// Duration is a time.Duration written as "5m" or "1h30m" in YAML and JSON.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d without zero trailing units: "5m", "1h", "1h30m", "90s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalText implements encoding.TextMarshaler (used by YAML and JSON).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: it accepts what
// time.ParseDuration accepts.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("cannot parse %q as a duration (write it like \"30s\", \"5m\" or \"1h30m\")", b)
	}
	*d = Duration(v)
	return nil
}
