package download

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestHeldUncheckedBytes: a partial whose bytes nothing checked (a peer's,
// taken while it fetched) is resumed only when a sha256 will check the
// whole file: the answer's, here, since the manifest gives none. Otherwise
// it is fetched again from its first byte, so bytes nothing checked never
// land; a whole such partial is fetched again too.
func TestHeldUncheckedBytes(t *testing.T) {
	body := weightsrv.RandomBytes(64<<10, 81)
	junk := bytes.Repeat([]byte{9}, len(body))
	for _, tc := range []struct {
		name       string
		held       []byte
		answerSHA  bool
		unchecked  bool
		want       []byte
		requests   int
		wantRanges int
	}{
		{"resumed, the answer's sha256 checks it", body[:len(body)/2], true, true, body, 1, 1},
		{"no sha256 anywhere: fetched again", junk[:len(body)/2], false, true, body, 2, 1},
		{"whole, no sha256 anywhere: fetched again", junk, false, true, body, 1, 0},
		// Bytes the caller vouches for are resumed as before.
		{"checked bytes resumed", junk[:len(body)/2], false, false, append(bytes.Clone(junk[:len(body)/2]), body[len(body)/2:]...), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, srv := weightsrv.New(t)
			m.Files["s/v/w.bin"] = body
			m.Unsummed = map[string]bool{"s/v/w.bin": true}
			m.NoAnswerSHA = !tc.answerSHA
			dir := t.TempDir()
			if err := os.WriteFile(PartialName(filepath.Join(dir, "w.bin")), tc.held, 0o600); err != nil {
				t.Fatal(err)
			}
			d := &Downloader{Logger: slog.New(slog.DiscardHandler)}
			p := &Progress{}
			files, err := d.List(context.Background(), srv.URL+"/s/v/", p)
			if err != nil {
				t.Fatal(err)
			}
			if files[0].SHA256 != "" {
				t.Fatalf("the manifest gave sha256 %s", files[0].SHA256)
			}
			files[0].HeldUnchecked = tc.unchecked
			landed, err := d.Fetch(context.Background(), dir, files, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "w.bin")); !bytes.Equal(got, tc.want) {
				t.Error("landed other bytes than expected")
			}
			if landed[0].SHA256 != weightsrv.SHA256(tc.want) {
				t.Errorf("landed sha256 %s", landed[0].SHA256)
			}
			if n, r := m.Count("s/v/w.bin"), len(m.Ranges()); n != tc.requests || r != tc.wantRanges {
				t.Errorf("%d requests, %d with a Range (%v); want %d, %d", n, r, m.Ranges(), tc.requests, tc.wantRanges)
			}
		})
	}
}
