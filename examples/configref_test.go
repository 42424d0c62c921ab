package examples

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/internal/konfig"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/spec"
)

// configurationDoc is the operators' configuration reference. Its key
// tables are generated from the config types: each sits between
//
//	<!-- generated from the config types: FILE PREFIX... -->
//	<!-- end generated -->
//
// and holds the keys of FILE (server.yaml, agent.yaml, model) that are a
// PREFIX or under one (=KEY: that key alone).
const configurationDoc = "../docs/configuration.md"

var generatedBlock = regexp.MustCompile(`(?s)<!-- generated from the config types: ([^>]*?) -->\n(.*?)<!-- end generated -->`)

// referenceRows are the keys of each file, from the types, their defaults
// and their doc comments.
func referenceRows(t *testing.T) map[string][]konfig.Row {
	t.Helper()
	docs := map[string]string{}
	for dir, pkg := range map[string]string{
		"../runtime/config": "github.com/llmgw/llmgw/runtime/config",
		"../agent/config":   "github.com/llmgw/llmgw/agent/config",
		"../spec":           "github.com/llmgw/llmgw/spec",
	} {
		d, err := konfig.FieldDocs(dir, pkg)
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(docs, d)
	}
	var server []konfig.Row
	for _, r := range konfig.Reference(config.Default(), docs) {
		if !strings.HasPrefix(r.Key, "models[]") { // under "model"
			server = append(server, r)
		}
	}
	model := spec.Model{Profiles: []spec.Profile{{}}}
	model.Normalize()
	return map[string][]konfig.Row{
		"server.yaml": server,
		"agent.yaml":  konfig.Reference(agentconfig.Default(), docs),
		"model":       konfig.Reference(model, docs),
	}
}

// under reports whether key is prefix or under it; "=key" is that key
// alone.
func under(key, prefix string) bool {
	if exact, ok := strings.CutPrefix(prefix, "="); ok {
		return key == exact
	}
	return key == prefix || strings.HasPrefix(key, prefix+".") || strings.HasPrefix(key, prefix+"[")
}

// renderConfigurationDoc returns doc with every generated table made anew,
// or the problems that keep it from being generated.
func renderConfigurationDoc(doc string, rows map[string][]konfig.Row) (string, []string) {
	var problems []string
	placed := map[string]map[string]int{}
	out := generatedBlock.ReplaceAllStringFunc(doc, func(block string) string {
		m := generatedBlock.FindStringSubmatch(block)
		fields := strings.Fields(m[1])
		file, prefixes := fields[0], fields[1:]
		all, ok := rows[file]
		if !ok {
			problems = append(problems, fmt.Sprintf("a generated table names %q: it must be server.yaml, agent.yaml or model", file))
			return block
		}
		if placed[file] == nil {
			placed[file] = map[string]int{}
		}
		var picked []konfig.Row
		for _, r := range all {
			for _, p := range prefixes {
				if under(r.Key, p) {
					picked = append(picked, r)
					placed[file][r.Key]++
					break
				}
			}
		}
		return "<!-- generated from the config types: " + m[1] + " -->\n" + konfig.Markdown(picked) + "<!-- end generated -->"
	})
	for file, rs := range rows {
		for _, r := range rs {
			switch n := placed[file][r.Key]; {
			case n == 0:
				problems = append(problems, fmt.Sprintf("%s key %s is in no generated table of %s: add it (or a prefix of it) to the table of its section", file, r.Key, configurationDoc))
			case n > 1:
				problems = append(problems, fmt.Sprintf("%s key %s is in %d generated tables; give it one", file, r.Key, n))
			}
			if r.Meaning == "" {
				problems = append(problems, fmt.Sprintf("%s key %s has no meaning: give its field a doc comment", file, r.Key))
			}
		}
	}
	return out, problems
}

// TestConfigurationReference holds docs/configuration.md's key tables
// equal to the configuration the loaders accept: every key of server.yaml,
// agent.yaml and a model definition, with its type, default and meaning
// (the field's doc comment). LLMGW_UPDATE_DOCS=1 (make docs) rewrites them.
func TestConfigurationReference(t *testing.T) {
	raw, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	out, problems := renderConfigurationDoc(string(raw), referenceRows(t))
	for _, p := range problems {
		t.Error(p)
	}
	if out == string(raw) {
		return
	}
	if os.Getenv("LLMGW_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(configurationDoc, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's key tables differ from the config types: run make docs and commit", configurationDoc)
}

// TestConfigurationReferenceFindsNewKey: a key added to a type and placed
// in no table is reported by name.
func TestConfigurationReferenceFindsNewKey(t *testing.T) {
	rows := referenceRows(t)
	rows["agent.yaml"] = append(rows["agent.yaml"], konfig.Row{Key: "brand_new", Type: "string", Default: "`\"\"`", Meaning: "new"})
	raw, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, problems := renderConfigurationDoc(string(raw), rows)
	if len(problems) != 1 || !strings.Contains(problems[0], "agent.yaml key brand_new is in no generated table") {
		t.Errorf("problems = %q, want one naming brand_new", problems)
	}
}
