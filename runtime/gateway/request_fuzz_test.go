package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzForwardedAgrees feeds the request reader odd JSON and checks that
// what admission saw is what the engine receives: the forwarded body,
// decoded as an engine decodes it, has the model the gateway resolved, the
// stream flag and n and best_of admission counted, and every completion
// bound set to the bound admission reserved for. Two engines read it:
// Python's json as vLLM and SGLang use it (exact keys, the last duplicate
// wins: encoding/json into a map) and Go's encoding/json into a struct as
// the sim engine uses it (keys matched case-insensitively, the last match
// wins). And no key the gateway reads appears twice, so a parser that keeps
// the first duplicate reads the same.
//
// The seeds run in every go test; go test -fuzz=FuzzForwardedAgrees
// explores further.
func FuzzForwardedAgrees(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m"}`,
		`{"model":"m","max_tokens":1,"messages":[],"max_tokens":200}`,
		`{"model":"m","max_tokens":1,"max_tokens":null}`,
		`{"model":"m","max_tokens":null}`,
		`{"model":"a","model":"b"}`,
		`{"model":"m","max\u005ftokens":1,"max_tokens":200}`,
		`{"model":"m","max\u005ftokens":3}`,
		`{"m\u006fdel":"x","stream":true}`,
		`{"model":"m","MAX_TOKENS":9,"Max_Tokens":8,"max_tokens":2}`,
		`{"model":"m","max_tokens":2,"MAX_TOKENS":900}`,
		"{\"model\":\"m\",\"max_to\u212Aens\":900}",
		"{\"model\":\"m\",\"\u017Ftream\":true}",
		`{"model":"m","max_completion_tokens":0,"max_tokens":5}`,
		`{"model":"m","max_tokens":5,"max_completion_tokens":900,"n_predict":-1}`,
		`{"model":"m","n_predict":100000}`,
		`{"model":"m","max_tokens":1e400}`,
		`{"model":"m","max_tokens":99999999999999999999999}`,
		`{"model":"m","max_tokens":16777216,"n":128,"best_of":128}`,
		`{"model":"m","max_tokens":-0}`,
		`{"model":"m","n":null,"best_of":null,"stream":null,"stream_options":null}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`,
		`{"model":"m","stream":false,"stream":true}`,
		`{"model":"m","prompt":[[1,2],[3]],"n":2}`,
		`{"model":"m","prompt":"a","prompt":["a","b","c"]}`,
		`{"model":"m","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
		`{"model":"m","x":` + strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat("}", 100) + `}`,
		" \t\n{ \"model\" : \"m\" , \"max_tokens\" : 7 }\n",
		`{"model":"m\ud800","max_tokens":1}`,
		`{"model":"m","":1,"\u0000":2}`,
		`{}`,
		`[]`,
		`{"model":"m"}{"max_tokens":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, aerr := parseRequest(body)
		if aerr != nil {
			return // refused: nothing reaches admission or the engine
		}
		if !json.Valid(body) {
			t.Fatalf("parsed a body that is not valid JSON: %q", body)
		}
		// What admission does with it: reserve the client's bound, else
		// a model's max_output (1000 stands in); usage is injected when a
		// stream did not ask for it.
		bound := req.maxTokens
		if bound == 0 {
			bound = 1000
		}
		inject := req.stream && !req.includeUsage
		out, err := req.rewrite(body, "canonical", inject, bound)
		if err != nil {
			t.Fatalf("rewrite: %v", err)
		}

		var engine map[string]json.RawMessage
		if err := json.Unmarshal(out, &engine); err != nil {
			t.Fatalf("forwarded body does not decode: %v\nin:  %q\nout: %q", err, body, out)
		}
		for key, n := range topLevelKeys(t, out) {
			if n > 1 && slices.Contains(readKeys, key) {
				t.Fatalf("forwarded body holds %q %d times: %q", key, n, out)
			}
		}
		var model string
		if err := json.Unmarshal(engine["model"], &model); err != nil || model != "canonical" {
			t.Fatalf("engine reads model %q (%v), admission resolved %q: %q", model, err, "canonical", out)
		}
		if got := decodeBool(t, engine, "stream"); got != req.stream {
			t.Fatalf("engine reads stream %v, admission saw %v: %q", got, req.stream, out)
		}
		if req.stream {
			var opts struct {
				IncludeUsage bool `json:"include_usage"`
			}
			if err := json.Unmarshal(engine["stream_options"], &opts); err != nil || !opts.IncludeUsage {
				t.Fatalf("a stream is forwarded without include_usage: %q", out)
			}
		}
		if got := decodeInt(t, engine, "n"); got != req.n {
			t.Fatalf("engine reads n %d, admission saw %d: %q", got, req.n, out)
		}
		if got := decodeInt(t, engine, "best_of"); got != req.bestOf {
			t.Fatalf("engine reads best_of %d, admission saw %d: %q", got, req.bestOf, out)
		}
		if raw, ok := engine["prompt"]; ok {
			if n, ids := countPrompts(raw); n != req.prompts || ids != req.tokenIDs {
				t.Fatalf("engine reads %d prompts (ids %v), admission saw %d (%v): %q", n, ids, req.prompts, req.tokenIDs, out)
			}
		}
		if got := decodeInt(t, engine, "max_tokens"); got != bound {
			t.Fatalf("engine reads max_tokens %d, admission reserved %d: %q", got, bound, out)
		}
		for _, key := range []string{"max_completion_tokens", "n_predict"} {
			if _, ok := engine[key]; ok && decodeInt(t, engine, key) != bound {
				t.Fatalf("engine reads %s %d, admission reserved %d: %q", key, decodeInt(t, engine, key), bound, out)
			}
		}

		var sim struct {
			Model               string `json:"model"`
			Stream              *bool  `json:"stream"`
			MaxTokens           *int   `json:"max_tokens"`
			MaxCompletionTokens *int   `json:"max_completion_tokens"`
			NPredict            *int   `json:"n_predict"`
			N                   *int   `json:"n"`
			BestOf              *int   `json:"best_of"`
		}
		if err := json.Unmarshal(out, &sim); err != nil {
			t.Fatalf("a Go engine cannot decode the forwarded body: %v\nin:  %q\nout: %q", err, body, out)
		}
		deref := func(p *int) int {
			if p == nil {
				return 0
			}
			return *p
		}
		switch {
		case sim.Model != "canonical",
			(sim.Stream != nil && *sim.Stream) != req.stream,
			deref(sim.N) != req.n, deref(sim.BestOf) != req.bestOf,
			deref(sim.MaxTokens) != bound,
			sim.MaxCompletionTokens != nil && *sim.MaxCompletionTokens != bound,
			sim.NPredict != nil && *sim.NPredict != bound:
			t.Fatalf("a Go engine reads model %q stream %v n %d best_of %d max_tokens %d max_completion_tokens %d n_predict %d;"+
				" admission saw stream %v n %d best_of %d bound %d\nin:  %q\nout: %q",
				sim.Model, sim.Stream != nil && *sim.Stream, deref(sim.N), deref(sim.BestOf), deref(sim.MaxTokens),
				deref(sim.MaxCompletionTokens), deref(sim.NPredict), req.stream, req.n, req.bestOf, bound, body, out)
		}
	})
}

// topLevelKeys counts the top-level keys of a JSON object, unescaped.
func topLevelKeys(t *testing.T, body []byte) map[string]int {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys[tok.(string)]++
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// decodeInt reads an integer the way the engine does; absent and null are
// 0, as admission counts them.
func decodeInt(t *testing.T, m map[string]json.RawMessage, key string) int {
	raw, ok := m[key]
	if !ok {
		return 0
	}
	var v *int
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("engine cannot read %s %s: %v", key, raw, err)
	}
	if v == nil {
		return 0
	}
	return *v
}

func decodeBool(t *testing.T, m map[string]json.RawMessage, key string) bool {
	raw, ok := m[key]
	if !ok {
		return false
	}
	var v *bool
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("engine cannot read %s %s: %v", key, raw, err)
	}
	return v != nil && *v
}

// FuzzParseAgrees: the hand walk of a valid body (parseValid) finds what
// the decoder finds (parseStrict): the same fields, spans and bounds, or
// the same refusal; a body it does not take is left to the decoder.
func FuzzParseAgrees(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m"}`,
		` {"model" : "m\"x" , "max_tokens": 5, "messages":[{"role":"user","content":"a\\\"b}]"}], "stream":true}`,
		`{"model":"m","max_tokens":1e2}`,
		`{"model":"m","max_tokens":-0,"n":3,"best_of":null}`,
		`{"model":"m","max_tokens":99999999999999999999999}`,
		`{"model":"m","stream":"yes"}`,
		`{"model":5}`,
		`{"model":null}`,
		`{"model":"\u00e9","m\u006fdel":"x"}`,
		"{\"model\":\"\xff\"}",
		"{\"mod\xffel\":\"a\",\"model\":\"b\"}",
		`{"model":"m","prompt":[[1,2],[3]],"stream_options":{"include_usage":true}}`,
		`{"model":"m","MAX_TOKENS":9}`,
		`{"model":"m","x":[{"y":"]}"},[]],"max_tokens":3}`,
		`{"model":"m","max_tokens":1,"max_tokens":2}`,
		`{}`,
		`[]`,
		`{"model":"m"}{}`,
		`{"model":"m",}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok, fastErr := parseValid(bytes.Clone(body))
		if !ok {
			return
		}
		strict, strictErr := parseStrict(body)
		if !reflect.DeepEqual(fast, strict) || !reflect.DeepEqual(fastErr, strictErr) {
			t.Fatalf("%q:\nwalked  %+v %+v\ndecoded %+v %+v", body, fast, fastErr, strict, strictErr)
		}
	})
}
