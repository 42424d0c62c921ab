package enginecheck

import (
	"regexp"
	"sort"
	"strings"
)

// Help is what an engine's help output says about its flags.
type Help struct {
	// Flags are the flags the help lists, sorted.
	Flags []string
	// Summary says the output was a summary that lists no flag of its own
	// (vLLM's `serve --help` from 0.10 on: its groups and "--help=all"),
	// so the flags are not known from it.
	Summary bool
	// Truncated says the output ends in the middle of a line or of the
	// usage: it was cut short, so a flag not in Flags may still exist.
	Truncated bool
}

// flagRe is a flag as help texts write it: one or two dashes, a letter,
// then letters, digits, "-", "_" or "." (vLLM's --json-arg.key), ending on
// a letter or digit. A word broken at a hyphen by the help's line wrapping
// ("--max-num-") does not end on one.
var flagRe = regexp.MustCompile(`^--?[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$`)

// usageFlagRe finds flags inside a usage block: at a word start or after
// "[", "|" or "(".
var usageFlagRe = regexp.MustCompile(`(?:^|[\s\[|(])(--?[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?)`)

// ParseHelp reads the flags out of an engine's help text. It understands
// the two shapes the engines print:
//
//   - option lines, where a line's first word is a flag, as Python's argparse
//     ("  --port PORT   Port number", "  --enable-x, --no-enable-x") and
//     llama.cpp ("-c,    --ctx-size N   size of ...") write them: every flag
//     before the help text, with aliases, is taken;
//   - argparse's usage block ("usage: prog [-h] --model-path MODEL_PATH
//     [--port PORT] ..."), wrapped over many lines, which lists the first
//     name of every flag (all an error message or a recorded usage shows).
//
// Flags are whole words: "--port" is not found inside "--port-range", and a
// word broken at a hyphen by the wrapping of a help paragraph is not taken
// for a flag. A flag named only inside a help paragraph is not taken either.
func ParseHelp(text string) Help {
	var h Help
	seen := map[string]bool{}
	add := func(f string) {
		if !seen[f] {
			seen[f] = true
			h.Flags = append(h.Flags, f)
		}
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	inUsage := false
	openBrackets := 0
	unbalanced := false
	for _, line := range lines {
		line = strings.TrimRight(line, "\r")
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(strings.ToLower(trimmed), "usage:") {
			inUsage = true
			openBrackets = 0
		} else if inUsage && (trimmed == "" || !startsWithSpace(line)) {
			inUsage = false
			unbalanced = unbalanced || openBrackets > 0
		}
		if inUsage {
			body := trimmed
			if strings.HasPrefix(strings.ToLower(body), "usage:") {
				body = body[len("usage:"):]
			}
			openBrackets += strings.Count(body, "[") - strings.Count(body, "]")
			for _, m := range usageFlagRe.FindAllStringSubmatch(body, -1) {
				add(m[1])
			}
			continue
		}
		optionLine(trimmed, add)
	}
	sort.Strings(h.Flags)
	h.Summary = isSummary(text)
	// Output that stops inside a line, or a usage whose brackets never
	// close, was cut short.
	h.Truncated = text != "" && !strings.HasSuffix(text, "\n") || unbalanced || inUsage && openBrackets > 0
	return h
}

// optionLine takes the flags at the start of an option line: flags (with
// a trailing comma between aliases) and their metavariables ("PORT", "N",
// "{auto,fp8}", "[on|off|auto]", "<0|1>", "lo-hi"), until the help text
// starts.
func optionLine(trimmed string, add func(string)) {
	if !strings.HasPrefix(trimmed, "-") {
		return
	}
	for i, w := range strings.Fields(trimmed) {
		f := strings.TrimSuffix(w, ",")
		if flagRe.MatchString(f) {
			add(f)
			continue
		}
		if i == 0 || !isMetavar(f) {
			return
		}
	}
}

// isMetavar reports whether w reads as a flag's value placeholder rather
// than the first word of its help.
func isMetavar(w string) bool {
	if w == "" {
		return false
	}
	switch w[0] {
	case '{', '[', '<', '(':
		return true
	}
	if strings.ContainsAny(w, "|") {
		return true
	}
	upper := false
	for _, r := range w {
		switch {
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= '0' && r <= '9', r == '_', r == '-', r == '.', r == ',', r == ']', r == '}', r == '>':
		default:
			return false
		}
	}
	return upper
}

// isSummary recognises a help that points elsewhere for its flags: vLLM's
// `serve --help` lists its config groups and says to ask --help=all.
func isSummary(text string) bool {
	return strings.Contains(text, "--help=all") && strings.Contains(text, "Config Groups:")
}

func startsWithSpace(s string) bool {
	return s != "" && (s[0] == ' ' || s[0] == '\t')
}
