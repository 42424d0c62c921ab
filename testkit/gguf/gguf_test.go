package gguf

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestEncode checks the header and that the file ends where the last
// tensor does: the real check is e2e/llamacpp_test.go, where llama-server
// loads the file.
func TestEncode(t *testing.T) {
	var a, b bytes.Buffer
	if err := Encode(&a, Model{}); err != nil {
		t.Fatal(err)
	}
	if err := Encode(&b, Model{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two encodings of the same model differ")
	}
	data := a.Bytes()
	if string(data[:4]) != "GGUF" || binary.LittleEndian.Uint32(data[4:]) != 3 {
		t.Fatalf("header % x", data[:8])
	}
	// 3 + 9 per layer tensors, 21 metadata pairs.
	if n, kv := binary.LittleEndian.Uint64(data[8:]), binary.LittleEndian.Uint64(data[16:]); n != 3+9*2 || kv != 21 {
		t.Fatalf("%d tensors, %d metadata pairs", n, kv)
	}
	if len(data)%alignment != 0 || len(data) > 1<<20 {
		t.Fatalf("%d bytes: want a multiple of %d below 1 MiB", len(data), alignment)
	}
	tokens, types := vocabulary()
	if len(tokens) != 256+len(merges)+3+2 || TokenID(ToolCallToken) != 256+len(merges)+3 || len(types) != len(tokens) || tokens['A'] != "A" || tokens[' '] != "Ġ" {
		t.Fatalf("vocabulary of %d tokens: %q %q", len(tokens), tokens['A'], tokens[' '])
	}
	if err := Encode(&a, Model{Embedding: 30, Heads: 4}); err == nil {
		t.Fatal("an embedding not divisible by the heads was accepted")
	}
}
