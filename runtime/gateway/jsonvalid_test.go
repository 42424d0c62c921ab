package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidAgrees: validJSON says what encoding/json.Valid says, for any
// bytes.
func FuzzValidAgrees(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi \u00e9 \"q\" \\ \/"}],"max_tokens":16,"stream":true,"temperature":0.5e-3}`,
		`{"id":"c1","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		` [1, -0, 0.5, 1e9, -1E+2, true, false, null, "", {}, []] `,
		`{}`, `[]`, `""`, `0`, `-`, `01`, `1.`, `.5`, `1e`, `+1`, `-a`, `1.e5`,
		`{"a":1,}`, `[1,]`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `[1 2]`, `{"a":1}}`, `{"a":1}x`,
		"\"\t\"", `"\x"`, `"\u12"`, `"\u12G4"`, `"abc`, `"\`, `tru`, `nul`, `fals`, `truex`, `nullnull`,
		"\xff\"\"", "\"\xff\xfe\"", `[[[[[[[[[[]]]]]]]]]]`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000), "", " ", "\n{\r\n}\t",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("%q: validJSON %v, json.Valid %v", data, got, want)
		}
	})
}

// BenchmarkValidJSON: a 24 KB chat body (about 6,000 tokens of prompt)
// through validJSON and through encoding/json.Valid.
func BenchmarkValidJSON(b *testing.B) {
	body := []byte(`{"model":"coder","messages":[{"role":"system","content":"` + strings.Repeat(`You are a careful assistant; answer with \"facts\" only.\n`, 400) + `"},{"role":"user","content":"hello"}],"max_tokens":256,"stream":true}`)
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !validJSON(body) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !json.Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
}
