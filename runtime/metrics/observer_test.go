package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/spec"
)

func newObserver(t testing.TB) (*Registry, *Observer) {
	t.Helper()
	r := New()
	o, err := NewObserver(r)
	if err != nil {
		t.Fatal(err)
	}
	return r, o
}

// served is a streamed request a replica answered.
func served() request.Record {
	return request.Record{
		Principal: request.Principal{KeyID: "key-1", Project: "team-a"},
		Model:     "qwen", Endpoint: "/v1/chat/completions", ReplicaID: "r1",
		Status: 200, PromptTokens: 12, CompletionTokens: 30, UsageReported: true,
		Latency: 1500 * time.Millisecond, TTFT: 80 * time.Millisecond, Own: 40 * time.Microsecond, Stream: true,
	}
}

func TestObserverCounts(t *testing.T) {
	type count struct {
		labels []string
		want   float64
	}
	cases := []struct {
		name      string
		rec       func() request.Record
		requests  count // model, project, status
		admission count // reason
		prompt    float64
		latency   int // observations in the model's latency histogram
		ttft      int
		own       int // observations of the gateway's own time: none where no engine answered
	}{
		{
			name:      "served stream",
			rec:       served,
			requests:  count{[]string{"qwen", "team-a", "200"}, 1},
			admission: count{[]string{"admitted"}, 1},
			prompt:    12, latency: 1, ttft: 1, own: 1,
		},
		{
			name: "not streamed: no time to first token",
			rec: func() request.Record {
				r := served()
				r.Stream, r.TTFT = false, 0
				return r
			},
			requests:  count{[]string{"qwen", "team-a", "200"}, 1},
			admission: count{[]string{"admitted"}, 1},
			prompt:    12, latency: 1, own: 1,
		},
		{
			name: "rate limited",
			rec: func() request.Record {
				return request.Record{Principal: request.Principal{Project: "team-a"}, Model: "qwen", Admission: "limit", Status: 429, Latency: time.Millisecond}
			},
			requests:  count{[]string{"qwen", "team-a", "429"}, 1},
			admission: count{[]string{"limit"}, 1},
		},
		{
			name: "budget spent",
			rec: func() request.Record {
				return request.Record{Principal: request.Principal{Project: "team-a"}, Model: "qwen", Admission: "budget", Status: 402}
			},
			requests:  count{[]string{"qwen", "team-a", "402"}, 1},
			admission: count{[]string{"budget"}, 1},
		},
		{
			name: "budget fallback",
			rec: func() request.Record {
				r := served()
				r.Requested, r.Model = "big", "qwen"
				return r
			},
			requests:  count{[]string{"qwen", "team-a", "200"}, 1},
			admission: count{[]string{"fallback"}, 1},
			prompt:    12, latency: 1, ttft: 1, own: 1,
		},
		{
			name: "no ready replica",
			rec: func() request.Record {
				return request.Record{Principal: request.Principal{Project: "team-a"}, Model: "qwen", Status: 503}
			},
			requests:  count{[]string{"qwen", "team-a", "503"}, 1},
			admission: count{[]string{"no_replica"}, 1},
		},
		{
			name: "admission error",
			rec: func() request.Record {
				return request.Record{Principal: request.Principal{Project: "team-a"}, Model: "qwen", Status: 500}
			},
			requests:  count{[]string{"qwen", "team-a", "500"}, 1},
			admission: count{[]string{"error"}, 1},
		},
		{
			name: "unknown model never reaches admission",
			rec: func() request.Record {
				return request.Record{Principal: request.Principal{Project: "team-a"}, Status: 404}
			},
			requests:  count{[]string{"", "team-a", "404"}, 1},
			admission: count{[]string{"admitted"}, 0},
		},
		{
			name: "free-text refusal reason is not a label",
			rec: func() request.Record {
				return request.Record{Principal: request.Principal{Project: "team-a"}, Model: "qwen", Admission: "Project Foo is over its limit", Status: 429}
			},
			requests:  count{[]string{"qwen", "team-a", "429"}, 1},
			admission: count{[]string{"other"}, 1},
		},
		{
			name: "abandoned stream charges the estimate",
			rec: func() request.Record {
				r := served()
				r.Status, r.UsageReported, r.UsageEstimated, r.PromptTokens, r.CompletionTokens = 499, false, true, 40, 3
				return r
			},
			requests:  count{[]string{"qwen", "team-a", "499"}, 1},
			admission: count{[]string{"admitted"}, 1},
			prompt:    40, latency: 1, ttft: 1, own: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, o := newObserver(t)
			rec := tc.rec()
			o.Observe(rec)
			if got := value(t, o.requests.WithLabelValues(tc.requests.labels...)); got != tc.requests.want {
				t.Errorf("llmgw_requests_total%v = %v, want %v", tc.requests.labels, got, tc.requests.want)
			}
			if got := value(t, o.admission.WithLabelValues(tc.admission.labels...)); got != tc.admission.want {
				t.Errorf("llmgw_admission_total%v = %v, want %v", tc.admission.labels, got, tc.admission.want)
			}
			if got := value(t, o.tokens.WithLabelValues(rec.Model, "team-a", "prompt")); got != tc.prompt {
				t.Errorf("prompt tokens = %v, want %v", got, tc.prompt)
			}
			if got := histogramCount(t, r, "llmgw_request_duration_seconds"); got != tc.latency {
				t.Errorf("latency observations = %d, want %d", got, tc.latency)
			}
			if got := histogramCount(t, r, "llmgw_time_to_first_token_seconds"); got != tc.ttft {
				t.Errorf("ttft observations = %d, want %d", got, tc.ttft)
			}
			if got := histogramCount(t, r, "llmgw_gateway_own_seconds"); got != tc.own {
				t.Errorf("own time observations = %d, want %d", got, tc.own)
			}
		})
	}
}

func histogramCount(t *testing.T, r *Registry, name string) int {
	t.Helper()
	mfs, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += int(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

func TestObserverAccumulatesAndBuckets(t *testing.T) {
	_, o := newObserver(t)
	for range 3 {
		o.Observe(served())
	}
	if got := value(t, o.requests.WithLabelValues("qwen", "team-a", "200")); got != 3 {
		t.Fatalf("requests = %v, want 3", got)
	}
	if got := value(t, o.tokens.WithLabelValues("qwen", "team-a", "completion")); got != 90 {
		t.Fatalf("completion tokens = %v, want 90", got)
	}
	out := exposition(t, collectorRegistry(t, o.ttft))
	for _, line := range []string{
		`llmgw_time_to_first_token_seconds_bucket{model="qwen",le="0.05"} 0`,
		`llmgw_time_to_first_token_seconds_bucket{model="qwen",le="0.1"} 3`,
		`llmgw_time_to_first_token_seconds_bucket{model="qwen",le="300"} 3`,
		`llmgw_time_to_first_token_seconds_sum{model="qwen"} 0.24`,
		`llmgw_time_to_first_token_seconds_count{model="qwen"} 3`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %s in\n%s", line, out)
		}
	}
	// The gateway's own time, in buckets of microseconds.
	out = exposition(t, collectorRegistry(t, o.own))
	for _, line := range []string{
		`llmgw_gateway_own_seconds_bucket{model="qwen",le="2.5e-05"} 0`,
		`llmgw_gateway_own_seconds_bucket{model="qwen",le="5e-05"} 3`,
		`llmgw_gateway_own_seconds_count{model="qwen"} 3`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %s in\n%s", line, out)
		}
	}
}

func TestObserverKnownReasonsStartAtZero(t *testing.T) {
	_, o := newObserver(t)
	if n := len(families(t, collectorRegistry(t, o.admission))["llmgw_admission_total"].GetMetric()); n != len(knownReasons) {
		t.Fatalf("admission series before any request = %d, want %d", n, len(knownReasons))
	}
	for _, reason := range []string{"admitted", "limit", "budget", "fallback", "no_replica", "model_not_allowed"} {
		if got := value(t, o.admission.WithLabelValues(reason)); got != 0 {
			t.Fatalf("llmgw_admission_total{reason=%q} = %v before any request", reason, got)
		}
	}
}

// No label may carry a key, a key id, a token, a request id or anything a
// client sent: feed records whose every field looks like a secret and scan
// the exposition.
func TestObserverNeverLabelsSecrets(t *testing.T) {
	apiKey, _, _ := spec.NewAPIKey()
	adminToken, _ := spec.NewAdminToken()
	secrets := []string{apiKey, adminToken, "Bearer " + apiKey, "sk-proj-abcdef0123456789"}
	ids := []string{"key-7f3a9c", "req-5b1e"}
	r, o := newObserver(t)
	for _, s := range append(ids, secrets...) {
		o.Observe(request.Record{
			Principal: request.Principal{KeyID: s, Project: "team-a"},
			Model:     "qwen", Requested: "big", Endpoint: s, RequestID: s, ReplicaID: s,
			Status: 200, PromptTokens: 1, CompletionTokens: 1, Latency: time.Second, TTFT: time.Millisecond, Stream: true,
		})
		o.Observe(request.Record{Principal: request.Principal{KeyID: s}, Model: "qwen", Admission: s, Status: 429})
	}
	// A bug upstream that put a secret where the model or project goes
	// must not publish it either.
	for _, s := range secrets {
		o.Observe(request.Record{Principal: request.Principal{KeyID: s, Project: s}, Model: s, Status: 401})
	}
	out := exposition(t, r.Gatherer())
	for _, s := range append(append(ids, secrets...), apiKey[:len(spec.APIKeyPrefix)+8]) {
		if strings.Contains(out, s) {
			t.Errorf("exposition contains %q", s)
		}
	}
	if !strings.Contains(out, `project="redacted"`) {
		t.Errorf("a secret-looking project was not redacted:\n%s", out)
	}
}

func TestLabelValue(t *testing.T) {
	apiKey, _, _ := spec.NewAPIKey()
	adminToken, _ := spec.NewAdminToken()
	cases := map[string]string{
		"qwen-coder-3b":          "qwen-coder-3b",
		"llmgw-demo":             "llmgw-demo", // a model may start like a key
		"default":                "default",
		"":                       "",
		apiKey:                   redacted,
		adminToken:               redacted,
		"Bearer x":               redacted,
		strings.Repeat("m", 200): redacted,
	}
	for in, want := range cases {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%.20q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkObserve(b *testing.B) {
	_, o := newObserver(b)
	rec := served()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Observe(rec)
		}
	})
}

// BenchmarkObserveManySeries spreads requests over 50 models × 20 projects.
func BenchmarkObserveManySeries(b *testing.B) {
	_, o := newObserver(b)
	recs := make([]request.Record, 0, 1000)
	for m := range 50 {
		for p := range 20 {
			r := served()
			r.Model = "model-" + string(rune('a'+m%26)) + string(rune('a'+m/26))
			r.Principal.Project = "project-" + string(rune('a'+p))
			recs = append(recs, r)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		o.Observe(recs[i%len(recs)])
	}
}
