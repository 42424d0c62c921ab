package spec

import (
	"errors"
	"fmt"
	"os"

	"github.com/llmgw/llmgw/internal/konfig"
)

// ParseModelYAML reads one model definition from YAML, strictly (an unknown
// key is an error naming the key and source), then normalizes and validates
// it. source names the data in errors, usually its file name.
func ParseModelYAML(data []byte, source string) (Model, error) {
	var m Model
	if err := konfig.Parse(data, source, &m); err != nil {
		return Model{}, err
	}
	m.Normalize()
	if err := m.Validate(); err != nil {
		var ps Problems
		if errors.As(err, &ps) {
			return Model{}, ps.Prefixed(source)
		}
		return Model{}, fmt.Errorf("%s: %w", source, err)
	}
	return m, nil
}

// ParseModelFile reads the model definition in the YAML file at path.
func ParseModelFile(path string) (Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Model{}, fmt.Errorf("reading model definition: %w", err)
	}
	return ParseModelYAML(data, path)
}

// ValidateSet checks models against each other: names and aliases are unique
// across the set and no alias equals another model's name. Keys are
// models[i].name and models[i].aliases[j]. Each model is assumed valid on
// its own (Validate reports an alias repeated within one model).
func ValidateSet(models []Model) error {
	type owner struct {
		index int
		alias bool
	}
	var ps Problems
	owners := map[string]owner{}
	for i, m := range models {
		if prev, dup := owners[m.Name]; dup {
			ps.add(fmt.Sprintf("models[%d].name", i), fmt.Sprintf("model %q is already defined at models[%d]", m.Name, prev.index))
			continue
		}
		owners[m.Name] = owner{index: i}
	}
	for i, m := range models {
		for j, a := range m.Aliases {
			prev, dup := owners[a]
			if !dup {
				owners[a] = owner{index: i, alias: true}
				continue
			}
			if prev.index == i {
				continue // within one model: Validate's to report
			}
			what := "the name of"
			if prev.alias {
				what = "an alias of"
			}
			ps.add(fmt.Sprintf("models[%d].aliases[%d]", i, j),
				fmt.Sprintf("alias %q of model %q is already %s model %q (models[%d])", a, m.Name, what, models[prev.index].Name, prev.index))
		}
	}
	return ps.orNil()
}
