package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmgw/llmgw/runtime/request"
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

// refuseOnce refuses the next request it is told to (429), as a rate
// limit does, and admits the rest.
type refuseOnce struct {
	fallbackAdmission
	refuse atomic.Bool
}

func (a *refuseOnce) Admit(ctx context.Context, p request.Principal, model string, in request.Info) (request.Ticket, error) {
	t, _ := a.fallbackAdmission.Admit(ctx, p, model, in)
	if a.refuse.Swap(false) {
		return nil, &request.Rejection{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded",
			Message: "over the key's rate limit", RetryAfter: time.Millisecond}
	}
	return t, nil
}

// TestThreadSDKRetryKeepsTheAnswerBefore: openai-go, unmodified, sends
// a turn that repeats the one before it ("continue"); the gateway
// refuses it once (429) and the SDK retries it on its own
// (X-Stainless-Retry-Count: 1). The retry is a new turn: the earlier
// "continue" keeps its answer, which the client got.
func TestThreadSDKRetryKeepsTheAnswerBefore(t *testing.T) {
	st := contentStore(t, 24)
	_, engURL := startSeenEngine(t, "big")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: engURL, Weight: 1}})
	adm := &refuseOnce{}
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st, Admission: adm})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	var attempts atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		httputil.NewSingleHostReverseProxy(mustURL(t, srv.URL)).ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	client := openai.NewClient(option.WithBaseURL(proxy.URL+"/v1"), option.WithAPIKey("key-proj"))
	var answers []string
	send := func(s string) {
		t.Helper()
		res, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: "big", MaxTokens: openai.Int(8),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(s)},
		}, option.WithHeader("X-Llmgw-Thread", "t1"))
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, res.Choices[0].Message.Content)
	}
	send("hello")
	send("continue")
	adm.refuse.Store(true)
	send("continue") // 429 once, then the SDK's retry is admitted
	if n := attempts.Load(); n != 4 {
		t.Fatalf("openai-go made %d requests, want 4 (the third turn refused once, then retried)", n)
	}
	th, err := st.(ThreadContent).GetThread(t.Context(), "proj", "t1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(th.Messages, &msgs)
	want := "user:hello | assistant:" + answers[0] + " | user:continue | assistant:" + answers[1] + " | user:continue | assistant:" + answers[2]
	if got := contents(msgs); got != want {
		t.Fatalf("the thread holds %q; want every turn with the answer the client got: %q", got, want)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
