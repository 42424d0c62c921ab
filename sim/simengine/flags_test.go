package simengine

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Config
		wantErr string // substring; empty means success
	}{
		{
			name: "defaults",
			args: []string{"--served-model-name", "m"},
			want: Config{Host: "127.0.0.1", Port: 8000, ServedModelName: "m", WorldSize: 1,
				PrefixCacheBlocks: 1024, BlockSize: 16, MaxModelLen: 8192, EmbeddingDim: 64, MaxNumSeqs: 256},
		},
		{
			name: "every flag",
			args: []string{"--host", "0.0.0.0", "--port", "0", "--served-model-name", "m", "--model", "hf://org/m",
				"--rank", "2", "--world-size", "3", "--dist-init-addr", "10.0.0.1:29500",
				"--prefill-tps", "1000", "--decode-tps", "50.5", "--prefix-cache-blocks", "8",
				"--block-size", "4", "--max-model-len", "100", "--embedding-dim", "8", "--max-num-seqs", "2",
				"--overshoot-tokens", "3"},
			want: Config{Host: "0.0.0.0", Port: 0, ServedModelName: "m", Model: "hf://org/m", Rank: 2, WorldSize: 3,
				DistInitAddr: "10.0.0.1:29500", PrefillTokensPerSec: 1000, DecodeTokensPerSec: 50.5,
				PrefixCacheBlocks: 8, BlockSize: 4, MaxModelLen: 100, EmbeddingDim: 8, MaxNumSeqs: 2, OvershootTokens: 3},
		},
		{name: "missing model name", args: nil, wantErr: "--served-model-name is required"},
		{name: "version needs nothing else", args: []string{"--version"}, want: Config{ShowVersion: true}},
		{name: "bad port", args: []string{"--served-model-name", "m", "--port", "x"}, wantErr: "-port"},
		{name: "port out of range", args: []string{"--served-model-name", "m", "--port", "70000"}, wantErr: "--port 70000"},
		{name: "unknown flag", args: []string{"--served-model-name", "m", "--tp", "2"}, wantErr: "-tp"},
		{name: "positional", args: []string{"--served-model-name", "m", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "rank out of range", args: []string{"--served-model-name", "m", "--rank", "3", "--world-size", "3", "--dist-init-addr", "h:1"}, wantErr: "--rank 3"},
		{name: "world without addr", args: []string{"--served-model-name", "m", "--world-size", "2"}, wantErr: "--dist-init-addr is required"},
		{name: "addr without port", args: []string{"--served-model-name", "m", "--world-size", "2", "--dist-init-addr", "host"}, wantErr: `--dist-init-addr "host"`},
		{name: "worker without host", args: []string{"--served-model-name", "m", "--rank", "1", "--world-size", "2", "--dist-init-addr", ":29500"}, wantErr: "rank 0's host"},
		{name: "negative prefill", args: []string{"--served-model-name", "m", "--prefill-tps", "-1"}, wantErr: "--prefill-tps"},
		{name: "negative overshoot", args: []string{"--served-model-name", "m", "--overshoot-tokens", "-1"}, wantErr: "--overshoot-tokens must not be negative"},
		{name: "negative decode", args: []string{"--served-model-name", "m", "--decode-tps", "-1"}, wantErr: "--decode-tps"},
		{name: "explicit zero block size", args: []string{"--served-model-name", "m", "--block-size", "0"}, wantErr: "--block-size"},
		{name: "negative max model len", args: []string{"--served-model-name", "m", "--max-model-len", "-5"}, wantErr: "--max-model-len"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseFlags(%q) error = %v, want it to contain %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFlags(%q): %v", tt.args, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseFlags(%q)\n got %+v\nwant %+v", tt.args, got, tt.want)
			}
		})
	}
}

// -h prints the usage line and every flag with its default (it once
// printed only "flag: help requested").
func TestParseFlagsHelp(t *testing.T) {
	var out strings.Builder
	_, err := ParseFlags([]string{"-h"}, &out)
	if fe := (*FlagError)(nil); !errors.As(err, &fe) || !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseFlags(-h) error = %v, want a *FlagError wrapping flag.ErrHelp", err)
	}
	for _, want := range []string{"usage: llmgw sim-engine --served-model-name NAME", "-served-model-name string", "-max-num-seqs int", "(default 256)", "(default \"127.0.0.1\")"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero config lacks a model name", cfg: Config{}, wantErr: "--served-model-name"},
		{name: "zero values take defaults", cfg: Config{ServedModelName: "m"}},
		{name: "negative block size", cfg: Config{ServedModelName: "m", BlockSize: -1}, wantErr: "--block-size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.cfg, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if e.cfg.BlockSize != DefaultBlockSize || e.cfg.MaxModelLen != DefaultMaxModelLen || e.cfg.WorldSize != 1 {
				t.Fatalf("defaults not applied: %+v", e.cfg)
			}
		})
	}
}
