package llmgw_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks that every relative link of README.md and the pages
// in docs/ names a file or directory that exists and, when it carries an
// #anchor, a heading of that page (GitHub's anchor rules). External links
// (with a scheme) are not fetched.
func TestDocLinks(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md"}, pages...)
	anchors := map[string]map[string]bool{} // page -> anchors, read once
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		text, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(text))
		anchors[page] = a
		return a, nil
	}
	checked := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(text)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
				st, err := os.Stat(target)
				if err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", page, l.line, l.target, target)
					continue
				}
				if st.IsDir() && anchor != "" {
					t.Errorf("%s:%d: link %q: an anchor on a directory", page, l.line, l.target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				continue // an anchor into a source file (a line number) is not checked
			}
			a, err := anchorsOf(target)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", page, l.line, l.target, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", page, l.line, l.target, target, anchor)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links found: is the link pattern still right?", checked)
	}
}

type mdLink struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink    = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
)

// markdownLinks returns the targets of a page's inline and reference links,
// outside fenced code blocks and code spans.
func markdownLinks(text string) []mdLink {
	var out []mdLink
	fence := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{n, m[1]})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			out = append(out, mdLink{n, m[1]})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives a page's headings:
// lowercased, punctuation but '-' and '_' dropped, spaces turned to '-',
// a repeated one suffixed -1, -2, ...; and the ids of <a id="..."> tags.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true // tfplugindocs' <a id="nestedatt--x"></a>
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		h = strings.NewReplacer("`", "", "*", "").Replace(h)
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestHeadingAnchors(t *testing.T) {
	a := headingAnchors("# llmgw\n## The `ctl` CLI: drain, rollout\n```\n# not a heading\n```\n## Drain\n## Drain\n### 2s/20s heartbeat (HA)\n")
	for _, want := range []string{"llmgw", "the-ctl-cli-drain-rollout", "drain", "drain-1", "2s20s-heartbeat-ha"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a comment in a code block became an anchor")
	}
}
