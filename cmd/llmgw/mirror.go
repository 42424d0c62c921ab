package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/llmgw/llmgw/internal/cliflags"
	"github.com/llmgw/llmgw/mirror"
)

func mirrorUsage() {
	fmt.Fprintln(os.Stderr, `usage: llmgw mirror <command> [flags]

commands:
  serve   serve a weights directory: bytes on --bytes-addr, management on --manage-addr
  fetch   fill DIR/MODEL/VERSION from hf:org/repo/file, hf:org/repo@revision, https://… or s3://…

run "llmgw mirror <command> -h" for its flags`)
}

func runMirror(ctx context.Context, args []string) int {
	if len(args) == 0 {
		mirrorUsage()
		return 2
	}
	switch args[0] {
	case "serve":
		return runMirrorServe(ctx, args[1:])
	case "fetch":
		return runMirrorFetch(ctx, args[1:])
	case "help", "-h", "--help":
		mirrorUsage()
		return 0
	}
	fmt.Fprintf(os.Stderr, "llmgw mirror: unknown command %q\n", args[0])
	mirrorUsage()
	return 2
}

// upstreamFlags are the flags serve and fetch share: where Hugging Face
// and S3 are.
type upstreamFlags struct {
	hfEndpoint, hfTokenFile, s3Endpoint, s3Region *string
}

func addUpstreamFlags(fs *flag.FlagSet) upstreamFlags {
	return upstreamFlags{
		hfEndpoint:  fs.String("hf-endpoint", envOr("HF_ENDPOINT", "https://huggingface.co"), "Hugging Face hub endpoint (HF_ENDPOINT)"),
		hfTokenFile: fs.String("hf-token-file", os.Getenv("HF_TOKEN_FILE"), "file holding the Hugging Face token (HF_TOKEN_FILE)"),
		s3Endpoint:  fs.String("s3-endpoint", "", "S3 endpoint URL (default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, then AWS)"),
		s3Region:    fs.String("s3-region", "", "S3 region (default AWS_REGION, AWS_DEFAULT_REGION)"),
	}
}

func (u upstreamFlags) fetcher() (*mirror.Fetcher, error) {
	tok, err := mirror.ReadTokenFile(*u.hfTokenFile)
	if err != nil {
		return nil, err
	}
	s3 := mirror.S3ConfigFromEnv(os.Getenv)
	if *u.s3Endpoint != "" {
		s3.Endpoint = *u.s3Endpoint
	}
	if *u.s3Region != "" {
		s3.Region = *u.s3Region
	}
	return &mirror.Fetcher{HFEndpoint: *u.hfEndpoint, HFToken: tok, S3: s3}, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runMirrorServe(ctx context.Context, args []string) int {
	fs := cliflags.New("llmgw mirror serve", "llmgw mirror serve [--dir /srv/models] --base URL [flags]", os.Stderr)
	dir := fs.String("dir", "/srv/models", "the weights directory: DIR/<model>/<version>/<files>")
	base := fs.String("base", "", "the URL agents reach the bytes listener at, e.g. http://models.internal:8081")
	bytesAddr := fs.String("bytes-addr", ":8081", "bytes listener (plain HTTP, read-only)")
	manageAddr := fs.String("manage-addr", ":8082", "management listener")
	ca := fs.String("tls-ca", "", "cluster CA: management clients must present a certificate it signed")
	cert := fs.String("tls-cert", "", "the management listener's certificate")
	key := fs.String("tls-key", "", "the management listener's key")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	up := addUpstreamFlags(fs)
	if err := cliflags.ParseNoArgs(fs, args); err != nil {
		return cliflags.ExitCode(err)
	}
	log, err := newLogger(*level)
	if err != nil {
		return fail("mirror serve", err)
	}
	f, err := up.fetcher()
	if err != nil {
		return fail("mirror serve", err)
	}
	f.Logger = log
	srv, err := mirror.New(mirror.Options{
		Dir: *dir, Base: *base, BytesAddr: *bytesAddr, ManageAddr: *manageAddr,
		TLSCA: *ca, TLSCert: *cert, TLSKey: *key, Fetcher: f, Logger: log,
	})
	if err != nil {
		return fail("mirror serve", err)
	}
	if err := srv.Run(ctx); err != nil {
		return fail("mirror serve", err)
	}
	return 0
}

func runMirrorFetch(ctx context.Context, args []string) int {
	fs := cliflags.New("llmgw mirror fetch", "llmgw mirror fetch --dir DIR --model M --version V SOURCE", os.Stderr)
	dir := fs.String("dir", "/srv/models", "the weights directory")
	model := fs.String("model", "", "model name (required)")
	version := fs.String("version", "", "version name (required)")
	level := fs.String("log-level", "warn", "debug, info, warn or error")
	up := addUpstreamFlags(fs)
	pos, err := cliflags.ParseN(fs, args, 1, "the SOURCE")
	if err != nil {
		return cliflags.ExitCode(err)
	}
	if err := cliflags.Required(fs, "model", "version"); err != nil {
		return cliflags.ExitCode(err)
	}
	log, err := newLogger(*level)
	if err != nil {
		return fail("mirror fetch", err)
	}
	f, err := up.fetcher()
	if err != nil {
		return fail("mirror fetch", err)
	}
	f.Logger = log
	st, err := mirror.NewStore(*dir)
	if err != nil {
		return fail("mirror fetch", err)
	}
	if err := f.FetchReporting(ctx, st, *model, *version, pos[0], os.Stdout, 2*time.Second); err != nil {
		return fail("mirror fetch", err)
	}
	return 0
}
