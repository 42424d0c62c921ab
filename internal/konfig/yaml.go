package konfig

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError rewrites a YAML parser error as "source:line: message".
func yamlError(source string, err error) error {
	msg := err.Error()
	var problems []*Problem
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l == "yaml: unmarshal errors:" {
			continue
		}
		p := &Problem{Source: source, Msg: "invalid YAML: " + strings.TrimPrefix(l, "yaml: ")}
		if m := yamlLineRE.FindStringSubmatch(l); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			p.Msg = "invalid YAML: " + m[2]
		}
		if strings.Contains(p.Msg, "into map[string]interface {}") {
			p.Msg = "the file must be a mapping of keys at the top level"
		}
		problems = append(problems, p)
	}
	if len(problems) == 0 {
		return fmt.Errorf("%s: %w", source, err)
	}
	return joinProblems(problems)
}

// yamlLines maps each key path (a.b[0].c) in a YAML document to the line it
// is on. It is best effort: a document it cannot parse gives an empty map.
func yamlLines(data []byte) map[string]int {
	lines := map[string]int{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return lines
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.AliasNode:
			if n.Alias != nil {
				walk(n.Alias, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := join(path, n.Content[i].Value)
				lines[k] = n.Content[i].Line
				walk(n.Content[i+1], k)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				k := fmt.Sprintf("%s[%d]", path, i)
				lines[k] = e.Line
				walk(e, k)
			}
		}
	}
	walk(doc.Content[0], "")
	return lines
}
