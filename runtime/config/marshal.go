package config

import (
	"fmt"
	"os"

	"github.com/llmgw/llmgw/internal/konfig"
)

// Marshal writes s as server.yaml for Load to read back: the keys whose
// values differ from Default()'s, so that what the file does not say is
// still the loader's default. comment, when not empty, heads the file as #
// lines. Start from Default() and change what differs: a field left at its
// zero value is written as that zero value (pprof_listen: "" turns pprof
// off, auth.enabled: false turns keys off).
func (s Server) Marshal(comment string) ([]byte, error) {
	return konfig.Marshal(s, Default(), comment)
}

// WriteFile writes s to path (mode 0600) as Marshal does.
func (s Server) WriteFile(path, comment string) error {
	b, err := s.Marshal(comment)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
