package ctl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// modelFile is a model definition as an operator writes it: the catalog
// shape of server.yaml's models entries, one model per file. Durations stay
// strings; the control plane validates them.
type modelFile struct {
	Name           string        `yaml:"name"`
	Aliases        []string      `yaml:"aliases,omitempty,flow"`
	Source         string        `yaml:"source"`
	RoutingProfile string        `yaml:"routing_profile,omitempty"`
	ContextLength  int32         `yaml:"context_length,omitempty"`
	MaxOutput      int32         `yaml:"max_output,omitempty"`
	Scaling        *scalingFile  `yaml:"scaling,omitempty"`
	Profiles       []profileFile `yaml:"profiles"`
}

// scalingFile is the scaling block of a model definition.
type scalingFile struct {
	Min         int32  `yaml:"min"`
	Max         int32  `yaml:"max"`
	IdleTimeout string `yaml:"idle_timeout,omitempty"`
}

// profileFile is one entry of a model definition's profiles.
type profileFile struct {
	Name           string            `yaml:"name"`
	Engine         string            `yaml:"engine"`
	GPUClass       string            `yaml:"gpu_class,omitempty"`
	TP             int32             `yaml:"tp,omitempty"`
	Nodes          int32             `yaml:"nodes,omitempty"`
	Weight         int32             `yaml:"weight,omitempty"`
	Priority       int32             `yaml:"priority,omitempty"`
	StartupTimeout string            `yaml:"startup_timeout,omitempty"`
	MinMemoryGB    int32             `yaml:"min_memory_gb,omitempty"`
	MinDiskGB      int32             `yaml:"min_disk_gb,omitempty"`
	Labels         map[string]string `yaml:"labels,omitempty"`
	Args           []string          `yaml:"args,omitempty,flow"`
}

// sections names the part of the file each YAML type is, for error messages.
var sections = map[string]string{
	"ctl.modelFile":   "the model",
	"ctl.scalingFile": "scaling",
	"ctl.profileFile": "a profile",
}

var unknownFieldRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)

// parseModelFile decodes one model definition strictly: an unknown key is an
// error naming the key, its line and the file (source).
func parseModelFile(data []byte, source string) (modelFile, error) {
	var m modelFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return modelFile{}, fmt.Errorf("reading model definition %s: the file is empty", source)
		}
		return modelFile{}, fmt.Errorf("reading model definition %s: %s", source, yamlErrorText(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return modelFile{}, fmt.Errorf("reading model definition %s: more than one YAML document; put one model per file", source)
	}
	if m.Name == "" {
		return modelFile{}, fmt.Errorf("reading model definition %s: no name", source)
	}
	return m, nil
}

// yamlErrorText rewrites the decoder's errors in the operator's terms.
func yamlErrorText(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		if m := unknownFieldRE.FindStringSubmatch(e); m != nil {
			where := sections[m[3]]
			if where == "" {
				where = m[3]
			}
			msgs = append(msgs, fmt.Sprintf("line %s: unknown key %q in %s", m[1], m[2], where))
			continue
		}
		msgs = append(msgs, e)
	}
	return strings.Join(msgs, "; ")
}
