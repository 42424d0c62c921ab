package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/sim/simengine"
)

// growingThreads stores another, large turn of the thread between a
// request's ThreadSize (before admission) and its GetThread (after), as
// a request of the same thread ending meanwhile does.
type growingThreads struct {
	store.Store
	once sync.Once
}

func (g *growingThreads) GetThread(ctx context.Context, project, id string, now time.Time) (store.Thread, error) {
	tc := g.Store.(ThreadContent)
	var err error
	g.once.Do(func() {
		var th store.Thread
		if th, err = tc.GetThread(ctx, project, id, now); err != nil {
			return
		}
		var msgs []json.RawMessage
		if err = json.Unmarshal(th.Messages, &msgs); err != nil {
			return
		}
		big, _ := json.Marshal(map[string]string{"role": "user", "content": strings.Repeat("lorem ipsum ", 20000)})
		msgs = append(msgs, big, json.RawMessage(`{"role":"assistant","content":"ok"}`))
		data, _ := json.Marshal(msgs)
		_, err = tc.PutThread(ctx, project, id, data, now.Add(time.Hour), th.Revision, "")
	})
	if err != nil {
		return store.Thread{}, err
	}
	return tc.GetThread(ctx, project, id, now)
}

// TestThreadGrownAfterAdmissionIsSentNoMore: a thread that grew between
// the size admission counted and the read after it (another turn of it
// stored meanwhile) is sent no more than admission reserved for (else
// the engine reads a prompt nobody is billed for): the newest turns
// that fit in the size counted, the rest said in x-llmgw-thread-trimmed;
// the thread is still kept whole.
func TestThreadGrownAfterAdmissionIsSentNoMore(t *testing.T) {
	for name, open := range contentStores(t, 24) {
		t.Run(name, func(t *testing.T) {
			base := open(t)
			small := `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]`
			if _, err := base.(ThreadContent).PutThread(t.Context(), "proj", "t1", []byte(small), time.Now().Add(time.Hour), 0, ""); err != nil {
				t.Fatal(err)
			}
			st := &growingThreads{Store: base}
			sim, err := simengine.New(simengine.Config{ServedModelName: "m", EOSAfter: 3, MaxModelLen: 1 << 20}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var sent [][]byte
			eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				sent = append(sent, body)
				mu.Unlock()
				r.Body = io.NopCloser(bytes.NewReader(body))
				sim.Handler().ServeHTTP(w, r)
			}))
			t.Cleanup(eng.Close)
			rt := router.New()
			rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "m-0", URL: eng.URL, Weight: 1}})
			adm := &fallbackAdmission{}
			// A model whose context is not known: nothing but the size
			// admission counted bounds what is sent.
			gw := New(Config{}, Deps{Catalog: unsizedCatalog{}, Auth: projectAuth{}, Routes: rt, Content: st, Admission: adm})
			srv := httptest.NewServer(gw.Handler())
			t.Cleanup(func() { srv.Close(); gw.Close() })
			h := bearer("key-proj")
			h["X-Llmgw-Thread"] = "t1"
			c := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", h, `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}]}`)
			if c.status != 200 {
				t.Fatalf("%d %s", c.status, c.raw)
			}
			info := adm.lastInfo()
			mu.Lock()
			body := sent[len(sent)-1]
			mu.Unlock()
			if len(body) > info.BodyBytes+len(`,"stream_options":{"include_usage":true}`) {
				t.Fatalf("the engine was sent %d bytes; admission reserved for a body of %d (prompt estimate %d)", len(body), info.BodyBytes, info.PromptEstimate)
			}
			var req struct {
				Messages []map[string]any `json:"messages"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatal(err)
			}
			// The grown thread's last turn alone passes the size counted:
			// the system message is all of the history that fits.
			if got := contents(req.Messages); got != "system:be brief | user:x" {
				t.Fatalf("the engine was sent %q", got)
			}
			if got := c.header.Get("X-Llmgw-Thread-Trimmed"); got != "2" {
				t.Fatalf("x-llmgw-thread-trimmed %q, want 2 (hi, and the turn stored meanwhile)", got)
			}
			th, err := base.(ThreadContent).GetThread(t.Context(), "proj", "t1", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			var msgs []map[string]any
			_ = json.Unmarshal(th.Messages, &msgs)
			if len(msgs) != 7 || msgs[3]["role"] != "user" || len(msgs[3]["content"].(string)) != 240000 || msgs[5]["content"] != "x" {
				t.Fatalf("the thread keeps %d messages, want all 7 (what was read, the turn, its answer)", len(msgs))
			}
		})
	}
}

// TestAdmittedHistory: what of a history a body may hold within the
// size admission counted.
func TestAdmittedHistory(t *testing.T) {
	sys := json.RawMessage(`{"role":"system","content":"s"}`)
	u1 := json.RawMessage(`{"role":"user","content":"1"}`)
	a1 := json.RawMessage(`{"role":"assistant","content":"a"}`)
	u2 := json.RawMessage(`{"role":"user","content":"` + strings.Repeat("2", 100) + `"}`)
	a2 := json.RawMessage(`{"role":"assistant","content":"b"}`)
	all := []json.RawMessage{sys, u1, a1, u2, a2}
	stored := len(`[`) + historyBytes(all) // the array as stored: brackets and commas
	for _, tt := range []struct {
		name    string
		max     int
		want    []json.RawMessage
		dropped int
	}{
		{"as sized", stored, all, 0},
		{"nothing sized", 0, nil, 2},
		{"the oldest turn left out", historyBytes([]json.RawMessage{sys, u2, a2}), []json.RawMessage{sys, u2, a2}, 1},
		{"the last turn passes alone", historyBytes([]json.RawMessage{sys, u1, a1}), []json.RawMessage{sys}, 2},
		{"the system message passes too", len(sys), nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped := admittedHistory(all, tt.max)
			if historyBytes(got) > tt.max || dropped != tt.dropped || len(got) != len(tt.want) {
				t.Fatalf("admittedHistory(%d) = %s, %d dropped; want %s, %d", tt.max, got, dropped, tt.want, tt.dropped)
			}
			for i := range got {
				if !bytes.Equal(got[i], tt.want[i]) {
					t.Fatalf("admittedHistory(%d) = %s; want %s", tt.max, got, tt.want)
				}
			}
		})
	}
}
