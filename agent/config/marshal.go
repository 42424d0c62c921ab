package config

import (
	"fmt"
	"os"

	"github.com/llmgw/llmgw/internal/konfig"
)

// Marshal writes a as agent.yaml for Load to read back: the keys whose
// values differ from Default()'s, so that what the file does not say is
// still the loader's default. comment, when not empty, heads the file as #
// lines. Start from Default() and change what differs: a field left at its
// zero value is written as that zero value.
func (a Agent) Marshal(comment string) ([]byte, error) {
	return konfig.Marshal(a, Default(), comment)
}

// WriteFile writes a to path (mode 0600) as Marshal does.
func (a Agent) WriteFile(path, comment string) error {
	b, err := a.Marshal(comment)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
