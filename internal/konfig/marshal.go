package konfig

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Marshal writes v as YAML through its `yaml` tags, leaving out every key
// whose value equals the one in defaults (the value Load starts from), so
// that what the file does not say is still filled by the loader and a
// changed default reaches files written before. Sections left empty are
// left out; lists are written whole when they differ at all. A mapping is
// pruned key by key, which for a map field is right only while its default
// is empty: none of the configuration types has a map with default entries.
//
// A key defaults has that v's YAML leaves out (an omitempty field holding
// its zero value where the default is not zero) is an error: the loader
// would fill in the default, which is not what v says. comment, when not
// empty, is written first, each line as a # comment. Indentation is two
// spaces.
func Marshal(v, defaults any, comment string) ([]byte, error) {
	var got, def yaml.Node
	if err := got.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding %T as YAML: %w", v, err)
	}
	if err := def.Encode(defaults); err != nil {
		return nil, fmt.Errorf("encoding the defaults of %T as YAML: %w", defaults, err)
	}
	if got.Kind != yaml.MappingNode || def.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("konfig: Marshal needs structs (YAML mappings), got %T and %T", v, defaults)
	}
	if err := prune(&got, &def, ""); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, l := range strings.Split(comment, "\n") {
		if comment == "" {
			break
		}
		b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
	}
	if len(got.Content) == 0 {
		return b.Bytes(), nil
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&got); err != nil {
		return nil, fmt.Errorf("writing %T as YAML: %w", v, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("writing %T as YAML: %w", v, err)
	}
	return b.Bytes(), nil
}

// prune removes from the mapping n every key whose value equals its value
// in the mapping def, descending into mappings both hold.
func prune(n, def *yaml.Node, path string) error {
	defs := map[string]*yaml.Node{}
	for i := 0; i+1 < len(def.Content); i += 2 {
		defs[def.Content[i].Value] = def.Content[i+1]
	}
	seen := map[string]bool{}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		seen[k.Value] = true
		d, ok := defs[k.Value]
		switch {
		case !ok:
		case sameNode(val, d):
			continue
		case val.Kind == yaml.MappingNode && d.Kind == yaml.MappingNode:
			if err := prune(val, d, join(path, k.Value)); err != nil {
				return err
			}
			if len(val.Content) == 0 {
				continue
			}
		}
		kept = append(kept, k, val)
	}
	n.Content = kept
	for i := 0; i+1 < len(def.Content); i += 2 {
		if k := def.Content[i].Value; !seen[k] {
			return fmt.Errorf("%s: the value cannot be written: its field is left out when empty, and the loader would then fill in the default", join(path, k))
		}
	}
	return nil
}

// sameNode reports whether two YAML trees hold the same values, whatever
// their style.
func sameNode(a, b *yaml.Node) bool {
	if a.Kind != b.Kind || a.Tag != b.Tag || a.Value != b.Value || len(a.Content) != len(b.Content) {
		return false
	}
	for i := range a.Content {
		if !sameNode(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}
