package spec

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSource(t *testing.T) {
	tests := []struct {
		in, kind, repo, rev, path, err string
		set                            bool
	}{
		{in: "", kind: ""},
		{in: "/var/lib/llmgw-models/x.gguf", kind: "local", path: "/var/lib/llmgw-models/x.gguf"},
		{in: "http://models.internal:8081/m/v/q4.gguf", kind: "url"},
		{in: "https://models.internal/m/v/", kind: "set"},
		{in: "hf:Qwen/Qwen2.5-Coder-3B-Instruct-GGUF/q4_k_m.gguf", kind: "hf", repo: "Qwen/Qwen2.5-Coder-3B-Instruct-GGUF", path: "q4_k_m.gguf"},
		{in: "hf:org/repo/sub/dir/f.gguf", kind: "hf", repo: "org/repo", path: "sub/dir/f.gguf"},
		{in: "Qwen/Qwen2.5-7B-Instruct", kind: "repo", repo: "Qwen/Qwen2.5-7B-Instruct"},
		{in: "sim://chat", kind: "other"},
		{in: "hf:Qwen/Qwen2.5-72B-Instruct", kind: "hf", repo: "Qwen/Qwen2.5-72B-Instruct", set: true},
		{in: "hf:org/repo@v1.0", kind: "hf", repo: "org/repo", rev: "v1.0", set: true},
		{in: "hf:org/repo@abc123/sub/f.gguf", kind: "hf", repo: "org/repo", rev: "abc123", path: "sub/f.gguf"},
		{in: "s3://weights/m/v/w.gguf", kind: "s3", path: "m/v/w.gguf"},
		{in: "s3://weights/m/v/", kind: "s3", path: "m/v/", set: true},
		{in: "hf:org", err: "is not hf:org/repo/file"},
		{in: "hf:org/repo@", err: "empty repository name or revision"},
		{in: "hf:org/repo/dir/", err: "is not hf:org/repo/file"},
		{in: "hf:org/repo/../x", err: "path segment"},
		{in: "s3://bucket", err: "is not s3://bucket/key"},
		{in: "s3:///key", err: "is not s3://bucket/key"},
		{in: "s3://b/a//c", err: "path segment"},
		{in: "http:///nohost", err: "has no host"},
		{in: "http://h:8081", err: "names no file"},
		{in: "http://user:pw@h/m/f", err: "carries credentials"},
		{in: "./models/x.gguf", err: "relative path"},
		{in: " /m", err: "spaces"},
		{in: "a/b/c", err: "neither"},
		{in: "/m\n", err: "spaces"},
		{in: "/m\x00x", err: "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := ParseSource(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseSource(%q) error = %v, want one containing %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSource(%q): %v", tt.in, err)
			}
			if string(s.Kind) != tt.kind || s.Repo != tt.repo || (tt.path != "" && s.Path != tt.path) {
				t.Errorf("ParseSource(%q) = kind %q repo %q path %q, want %q %q %q", tt.in, s.Kind, s.Repo, s.Path, tt.kind, tt.repo, tt.path)
			}
			if s.Revision != tt.rev || s.Set() != (tt.set || tt.kind == "set") {
				t.Errorf("ParseSource(%q) = revision %q set %v, want %q %v", tt.in, s.Revision, s.Set(), tt.rev, tt.set || tt.kind == "set")
			}
			if s.Fetched() != (tt.kind == "url" || tt.kind == "set" || tt.kind == "hf" || tt.kind == "s3") {
				t.Errorf("Fetched() = %v for kind %q", s.Fetched(), s.Kind)
			}
		})
	}
}

// TestModelValidateSource: a source that cannot be one is a problem keyed
// source.
func TestModelValidateSource(t *testing.T) {
	m := Model{Name: "m", Source: "hf:org/repo@", Profiles: []Profile{{Name: "p", Engine: "sim"}}}
	m.Normalize()
	err := m.Validate()
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Key != "source" {
		t.Fatalf("Validate() = %v, want one problem keyed source", err)
	}
}
