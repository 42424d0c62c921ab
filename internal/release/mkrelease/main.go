// Command mkrelease packs what `make release` built into the release's
// files, reproducibly (package release):
//
//	mkrelease -dist DIST -version V -mtime UNIX -manifest terraform-registry-manifest.json \
//	    -provider PLATFORM=BINARY... -binary FILE...
//
// For each provider PLATFORM (linux_amd64) it writes
// terraform-provider-llmgw_V_PLATFORM.zip holding BINARY as
// terraform-provider-llmgw_vV, the Terraform registry's layout; then
// terraform-provider-llmgw_V_manifest.json (a copy of the manifest),
// terraform-provider-llmgw_V_SHA256SUMS over the zips and the manifest,
// and SHA256SUMS over every -binary file.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/internal/release"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkrelease:", err)
		os.Exit(1)
	}
}

func run() error {
	dist := flag.String("dist", "dist", "the release directory")
	version := flag.String("version", "", "the version, without a leading v (required)")
	mtime := flag.Int64("mtime", 0, "the date of every zip entry, Unix seconds (the commit's time)")
	manifest := flag.String("manifest", "terraform-registry-manifest.json", "the provider's registry manifest")
	var providers, binaries list
	flag.Var(&providers, "provider", "PLATFORM=BINARY, a provider build (repeat)")
	flag.Var(&binaries, "binary", "a file to list in SHA256SUMS (repeat)")
	flag.Parse()
	if *version == "" || strings.HasPrefix(*version, "v") {
		return fmt.Errorf("-version %q: give the version without a leading v, like 0.9.0", *version)
	}
	when := time.Unix(*mtime, 0)
	prefix := "terraform-provider-llmgw_" + *version
	var provFiles []string
	for _, p := range providers {
		platform, bin, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("-provider %q is not PLATFORM=BINARY", p)
		}
		zipPath := filepath.Join(*dist, prefix+"_"+platform+".zip")
		if err := release.WriteZip(zipPath, []release.Entry{{Name: "terraform-provider-llmgw_v" + *version, Path: bin, Mode: 0o755}}, when); err != nil {
			return err
		}
		provFiles = append(provFiles, zipPath)
	}
	if len(providers) > 0 {
		m, err := os.ReadFile(*manifest)
		if err != nil {
			return fmt.Errorf("reading the registry manifest: %w", err)
		}
		mPath := filepath.Join(*dist, prefix+"_manifest.json")
		if err := os.WriteFile(mPath, m, 0o644); err != nil {
			return err
		}
		provFiles = append(provFiles, mPath)
		sums, err := release.Sums(provFiles)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*dist, prefix+"_SHA256SUMS"), []byte(sums), 0o644); err != nil {
			return err
		}
	}
	sums, err := release.Sums(binaries)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*dist, "SHA256SUMS"), []byte(sums), 0o644)
}
