package gateway

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestEventReaderFrames reads streams through readers that hand over one
// byte at a time, half of what is asked, or the last bytes with io.EOF,
// and holds the events to sseEvents (the relay's framing) byte for byte,
// the last one (cut short or empty) with io.EOF; and eventInHand to
// whether a whole next event was already read.
func TestEventReaderFrames(t *testing.T) {
	long := "data: " + strings.Repeat("x", 5000) + "\n\n" // grows the buffer
	for _, stream := range []string{
		"data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\ndata: [DONE]\n\n",
		": keep-alive\n\nevent: x\ndata: y\n\n\n\n",
		"data: cut sh",
		long + "data: after\n\n" + long,
		"\r\n\n\r\r\n",
		"",
	} {
		readers := map[string]func(io.Reader) io.Reader{
			"whole":    func(r io.Reader) io.Reader { return r },
			"one-byte": iotest.OneByteReader,
			"half":     iotest.HalfReader,
			"data-err": iotest.DataErrReader,
		}
		for name, wrap := range readers {
			er := newEventReader(wrap(strings.NewReader(stream)), nil)
			var got [][]byte
			for {
				ev, err := er.next()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("%s %q: err %v, want io.EOF", name, stream, err)
					}
					if len(ev) > 0 {
						got = append(got, bytes.Clone(ev))
					}
					break
				}
				if inHand, want := er.eventInHand(), eventIn(er.buf[er.start:]); inHand != want {
					t.Fatalf("%s %q: eventInHand %v, want %v", name, stream, inHand, want)
				}
				got = append(got, bytes.Clone(ev))
			}
			er.release()
			want := sseEvents([]byte(stream))
			if len(got) != len(want) {
				t.Fatalf("%s %q: %d events %q, want %d %q", name, stream, len(got), got, len(want), want)
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("%s %q: event %d is %q, want %q", name, stream, i, got[i], want[i])
				}
			}
		}
	}
}

// TestEventReaderInHand: an event that arrived with the one before it is
// in hand once that one is handed out; one still coming is not.
func TestEventReaderInHand(t *testing.T) {
	er := newEventReader(strings.NewReader("data: 1\n\ndata: 2\n\ndata: 3"), nil)
	defer er.release()
	if _, err := er.next(); err != nil {
		t.Fatal(err)
	}
	if !er.eventInHand() {
		t.Fatal("event 2 was read with event 1 but is not in hand")
	}
	if _, err := er.next(); err != nil {
		t.Fatal(err)
	}
	if er.eventInHand() {
		t.Fatal("event 3 has no end yet but is in hand")
	}
}

// TestEventReaderNoProgress: a source that returns nothing, again and
// again, ends the stream with io.ErrNoProgress instead of spinning.
func TestEventReaderNoProgress(t *testing.T) {
	er := newEventReader(emptyReader{}, nil)
	defer er.release()
	if _, err := er.next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("err %v, want io.ErrNoProgress", err)
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

// TestEventReaderBounded: an event that runs past maxEventBytes without
// its blank line is not held: next drops it and ends the stream with
// errEventTooLarge, the buffer no larger than the bound; an event just
// under the bound is read whole.
func TestEventReaderBounded(t *testing.T) {
	endless := io.LimitReader(repeatReader('a'), 3*maxEventBytes)
	er := newEventReader(endless, nil)
	ev, err := er.next()
	if !errors.Is(err, errEventTooLarge) || len(ev) != 0 {
		t.Fatalf("endless event: %d bytes, err %v; want none and %v", len(ev), err, errEventTooLarge)
	}
	if cap(er.buf) > maxEventBytes {
		t.Fatalf("buffer grew to %d bytes, past the bound %d", cap(er.buf), maxEventBytes)
	}
	if _, err := er.next(); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("next after the bound: err %v", err)
	}
	er.release()

	big := "data: " + strings.Repeat("x", maxEventBytes-100) + "\n\n"
	er = newEventReader(strings.NewReader(big+"data: [DONE]\n\n"), nil)
	defer er.release()
	if ev, err := er.next(); err != nil || string(ev) != big {
		t.Fatalf("event under the bound: %d bytes, err %v", len(ev), err)
	}
	if ev, err := er.next(); err != nil || string(ev) != "data: [DONE]\n\n" {
		t.Fatalf("event after it: %q, err %v", ev, err)
	}
}

// repeatReader reads one byte without end.
type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}
