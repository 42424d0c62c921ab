package llmgw_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The project's layout, as docs/development.md maps it (after the design's
// layout): arrows point down only.
//
//	cmd, devcluster                 wiring: may import anything below
//	runtime, agent, mirror,         the daemons and the two clients; none
//	provider, ctl, sim              imports another of this row
//	api, spec, pki, internal        the contract and shared libraries
//
// Inside a row a package imports only its own tree (runtime/x may import
// runtime/y). testkit/ holds test harnesses: only tests import it.

const module = "github.com/llmgw/llmgw"

// layer names the top of a package's path as the rules below use it.
func layer(pkg string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	if rel == "" {
		return "."
	}
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// bottom is the contract and the shared libraries: everything may import
// them, and they import only each other (api/specpb joins api to spec).
var bottom = []string{"api", "spec", "pki", "internal"}

// allowed lists, for each layer, the layers its production code may import
// besides its own tree and the bottom.
var allowed = map[string][]string{
	"cmd":        {"runtime", "agent", "mirror", "provider", "ctl", "sim", "devcluster"},
	"devcluster": {"runtime", "agent", "mirror", "sim"},
	"runtime":    nil,
	"agent":      nil,
	"mirror":     nil,
	"provider":   nil,
	"ctl":        nil,
	"sim":        nil,
	"testkit":    {"runtime", "agent", "mirror", "provider", "ctl", "sim", "devcluster"},
}

// bottomRules narrows the bottom further: what each bottom layer may import
// of the project. spec and pki stand alone (spec may use the config parser
// in internal/konfig); api's generated packages import api only, except
// api/specpb, the one conversion between the protocol and spec.
var bottomRules = map[string][]string{
	"api":      {"api"},
	"spec":     {"spec", "internal/konfig"},
	"pki":      {"pki"},
	"internal": {"internal"},
}

// narrow holds packages stricter than their layer.
var narrow = map[string][]string{
	// The scheduler is pure placement logic over the contract's types.
	"runtime/scheduler": {"spec"},
	"api/specpb":        {"api", "spec"},
}

type listed struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

func TestArrowsPointDown(t *testing.T) {
	pkgs := goList(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the test would check nothing", len(pkgs))
	}
	var bad []string
	for _, p := range pkgs {
		from := strings.TrimPrefix(p.ImportPath, module+"/")
		for _, imp := range p.Imports {
			if why := refused(from, imp, false); why != "" {
				bad = append(bad, fmt.Sprintf("%s imports %s: %s", from, strings.TrimPrefix(imp, module+"/"), why))
			}
		}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			if why := refused(from, imp, true); why != "" {
				bad = append(bad, fmt.Sprintf("%s (tests) import %s: %s", from, strings.TrimPrefix(imp, module+"/"), why))
			}
		}
	}
	slices.Sort(bad)
	for _, b := range slices.Compact(bad) {
		t.Error(b)
	}
}

// refused returns why package from may not import imp, or "".
func refused(from, imp string, test bool) string {
	if imp != module && !strings.HasPrefix(imp, module+"/") {
		return ""
	}
	to := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
	if to == from {
		return "" // an external test package importing its own package
	}
	fromLayer, toLayer := layer(from), layer(to)
	switch {
	case toLayer == "cmd":
		return "nothing imports cmd/: it only wires"
	case toLayer == "testkit" && !test && fromLayer != "testkit":
		return "testkit/ holds test harnesses; production code never imports it"
	}
	if test {
		// Tests may start what they test with the harnesses and the
		// simulated hardware, and the tests of whole systems (e2e,
		// examples, modules, the root) may import anything.
		switch {
		case toLayer == "testkit" || toLayer == "sim":
			return ""
		case slices.Contains([]string{"e2e", "examples", "modules", "."}, fromLayer):
			return ""
		}
	}
	if rule, ok := narrow[from]; ok {
		return within(to, rule, "may import only "+strings.Join(rule, ", ")+" of the project")
	}
	if rule, ok := bottomRules[fromLayer]; ok {
		return within(to, rule, "the contract and shared libraries import only "+strings.Join(rule, ", ")+" of the project")
	}
	if fromLayer == toLayer || slices.Contains(bottom, toLayer) {
		return ""
	}
	rule, ok := allowed[fromLayer]
	if !ok {
		return fmt.Sprintf("%s/ is not a layer of docs/development.md; add it to the arrows test with the rule it follows", fromLayer)
	}
	if slices.Contains(rule, toLayer) {
		return ""
	}
	switch {
	case fromLayer == "runtime" && toLayer == "agent", fromLayer == "agent" && toLayer == "runtime":
		return "the control plane and the agent never import each other; they share only api/ and spec/"
	case fromLayer == "provider" || fromLayer == "ctl":
		return "the Terraform provider and ctl speak the management API: they import api/, spec/, pki/ and internal/ only"
	}
	return fmt.Sprintf("%s/ sits beside %s/, not above it; share the code through spec/ or internal/", fromLayer, toLayer)
}

// within returns "" when to is one of rule's trees, otherwise why.
func within(to string, rule []string, why string) string {
	for _, r := range rule {
		if to == r || strings.HasPrefix(to, r+"/") {
			return ""
		}
	}
	return why
}

func goList(t *testing.T) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Error", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestRefusedNamesTheRule(t *testing.T) {
	tests := []struct {
		from, imp string
		test      bool
		want      string
	}{
		{"runtime/manage", module + "/agent/driver", false, "the control plane and the agent never import each other"},
		{"agent", module + "/runtime/fleet", false, "the control plane and the agent never import each other"},
		{"provider", module + "/runtime/models", false, "the Terraform provider and ctl speak the management API"},
		{"ctl", module + "/runtime/hostadmin", false, "the Terraform provider and ctl speak the management API"},
		{"runtime/scheduler", module + "/runtime/fleet", false, "may import only spec"},
		{"spec", module + "/api/managev1", false, "the contract and shared libraries import only"},
		{"runtime/server", module + "/cmd/llmgw", false, "nothing imports cmd/"},
		{"runtime/server", module + "/testkit/pgtest", false, "production code never imports it"},
		{"runtime/store", module + "/testkit/pgtest", true, ""},
		{"runtime/manage", module + "/spec", false, ""},
		{"provider", module + "/api/specpb", false, ""},
		{"cmd/llmgw", module + "/runtime/server", false, ""},
		{"runtime/gateway", "net/http", false, ""},
	}
	for _, tt := range tests {
		got := refused(tt.from, tt.imp, tt.test)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("refused(%s, %s, test=%v) = %q, want %q", tt.from, tt.imp, tt.test, got, tt.want)
		}
	}
}
