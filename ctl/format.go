package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// newTable writes aligned columns; call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes one table row.
func row(w io.Writer, cols ...string) {
	fmt.Fprintln(w, strings.Join(cols, "\t"))
}

// orDash stands in "-" for an empty cell, so columns stay aligned.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// humanAgo renders how long ago something was, compactly: 2s, 5m, 3h, 4d.
func humanAgo(now time.Time, unixMs int64) string {
	if unixMs <= 0 {
		return "never"
	}
	return humanDuration(now.Sub(time.UnixMilli(unixMs)))
}

// humanDuration renders d in its largest whole unit.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int64(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int64(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int64(d/(24*time.Hour)))
	}
}

// humanBytes renders a size in binary units, whole numbers: 503G, 512M.
func humanBytes(b uint64) string {
	const (
		mib = 1 << 20
		gib = 1 << 30
		tib = 1 << 40
	)
	switch {
	case b == 0:
		return "-"
	case b >= 10*tib:
		return fmt.Sprintf("%dT", b/tib)
	case b >= gib:
		return fmt.Sprintf("%dG", b/gib)
	default:
		return fmt.Sprintf("%dM", b/mib)
	}
}

// protoJSON is how every --json output renders messages: snake_case keys as
// in the .proto file, so `grep nvlink_peers` works.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true}

// writeJSON prints messages as one indented JSON array.
func writeJSON[M proto.Message](w io.Writer, msgs []M) error {
	raw := make([]json.RawMessage, 0, len(msgs))
	for _, m := range msgs {
		b, err := protoJSON.Marshal(m)
		if err != nil {
			return fmt.Errorf("encoding %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
		}
		raw = append(raw, b)
	}
	out, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

// writeJSONOne prints one message as indented JSON.
func writeJSONOne[M proto.Message](w io.Writer, m M) error {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", out.Bytes())
	return err
}

// oneLine folds a multi-line message into one line of at most max runes, for
// a table cell; the full text is printed elsewhere.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return strings.TrimRight(string(r[:max-1]), " ") + "…"
}

// costText renders a cost or an amount spent with four significant digits
// in plain decimal notation: 0.000033, 1.235, 12346; never 3.3e-05.
func costText(x float64) string {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	decimals := max(0, 3-int(math.Floor(math.Log10(math.Abs(x)))))
	s := strconv.FormatFloat(x, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
