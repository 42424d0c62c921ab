//go:build release

package release

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReleaseReproducible runs `make release` in two clones of the
// repository's HEAD at different paths and requires the same files with
// the same bytes; then checks what is in them: SHA256SUMS verifies with
// sha256sum -c, the binary for this machine prints the stamped version and
// commit, each provider zip holds terraform-provider-llmgw_vVERSION, and
// the manifest says protocol 6.0. The Go build cache is shared, so the
// packages compile once and the link runs in each clone. Run by make release-check (build tag release).
func TestReleaseReproducible(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(run(t, root, "git", "rev-parse", "HEAD"))
	const version = "1.2.3-test"
	var dists []string
	for _, name := range []string{"one", "clone-two"} {
		dir := filepath.Join(t.TempDir(), name)
		run(t, root, "git", "clone", "--quiet", "--no-hardlinks", root, dir)
		run(t, dir, "git", "checkout", "--quiet", head)
		start := time.Now()
		run(t, dir, "make", "--no-print-directory", "release", "VERSION="+version, "PROVIDER_PLATFORMS=linux/amd64 linux/arm64 darwin/arm64")
		t.Logf("make release in %s: %v", dir, time.Since(start).Round(time.Second))
		dists = append(dists, filepath.Join(dir, "dist"))
	}
	files := func(d string) []string {
		es, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	names := files(dists[0])
	want := []string{
		"SHA256SUMS", "llmgw-" + version + "-linux-amd64", "llmgw-" + version + "-linux-arm64",
		"terraform-provider-llmgw_" + version + "_SHA256SUMS", "terraform-provider-llmgw_" + version + "_darwin_arm64.zip",
		"terraform-provider-llmgw_" + version + "_linux_amd64.zip", "terraform-provider-llmgw_" + version + "_linux_arm64.zip",
		"terraform-provider-llmgw_" + version + "_manifest.json",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("dist holds %q, want %q", names, want)
	}
	if other := files(dists[1]); !slices.Equal(other, names) {
		t.Fatalf("the second build made %q, the first %q", other, names)
	}
	for _, n := range names {
		a, err := os.ReadFile(filepath.Join(dists[0], n))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dists[1], n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between the two builds of commit %s (%d and %d bytes)", n, head[:12], len(a), len(b))
		}
	}
	d := dists[0]
	run(t, d, "sha256sum", "-c", "SHA256SUMS")
	run(t, d, "sha256sum", "-c", "terraform-provider-llmgw_"+version+"_SHA256SUMS")
	out := run(t, d, filepath.Join(d, "llmgw-"+version+"-linux-"+runtime.GOARCH), "version")
	if re := regexp.MustCompile(`^llmgw ` + regexp.QuoteMeta(version) + ` \(commit ` + head[:12] + `, go`); !re.MatchString(out) {
		t.Errorf("llmgw version printed %q, want version %s and commit %s", out, version, head[:12])
	}
	for _, platform := range []string{"linux_amd64", "linux_arm64", "darwin_arm64"} {
		zr, err := zip.OpenReader(filepath.Join(d, "terraform-provider-llmgw_"+version+"_"+platform+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		if len(zr.File) != 1 || zr.File[0].Name != "terraform-provider-llmgw_v"+version || zr.File[0].Mode().Perm() != 0o755 {
			t.Errorf("%s zip holds %v, want one executable terraform-provider-llmgw_v%s", platform, zr.File, version)
		}
		zr.Close()
	}
	var manifest struct {
		Version  int `json:"version"`
		Metadata struct {
			ProtocolVersions []string `json:"protocol_versions"`
		} `json:"metadata"`
	}
	mb, err := os.ReadFile(filepath.Join(d, "terraform-provider-llmgw_"+version+"_manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mb, &manifest); err != nil || manifest.Version != 1 || !slices.Equal(manifest.Metadata.ProtocolVersions, []string{"6.0"}) {
		t.Errorf("manifest %s: %+v, %v; want version 1, protocol 6.0", mb, manifest, err)
	}
}

// run runs a command in dir and returns its standard output; a failure
// fails the test with its output.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, io.MultiWriter(&errb)
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s in %s: %v\n%s%s", name, strings.Join(args, " "), dir, err, out.String(), errb.String())
	}
	return out.String()
}
