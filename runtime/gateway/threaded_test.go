package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
)

// TestThreadsOnMessagesAndResponses: one thread continued by turns in
// three APIs (Responses through openai-go v3, unmodified, with the header
// as a request option; Anthropic Messages; chat completions): each turn
// is sent the turns before it, whatever API they came in, and answered
// in its own API's shape. A response made on a thread is stored with the
// whole conversation, so previous_response_id from it continues it too;
// previous_response_id together with a thread is refused, and so is a
// thread of a project that keeps none, in the API's error shape.
func TestThreadsOnMessagesAndResponses(t *testing.T) {
	st := contentStore(t, 24)
	if err := st.CreateProject(t.Context(), store.Project{Name: "off"}); err != nil {
		t.Fatal(err)
	}
	eng, engURL := startSeenEngine(t, "big")
	rt := router.New()
	rt.SetEndpoints("big", []router.Endpoint{{ReplicaID: "big-0", URL: engURL, Weight: 1}})
	gw := New(Config{}, Deps{Catalog: twoModels{}, Auth: projectAuth{}, Routes: rt, Content: st})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	ctx := t.Context()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("key-proj"), option.WithMaxRetries(0))
	onThread := option.WithHeader("X-Llmgw-Thread", "mixed")

	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "big",
		Instructions: openai.String("be brief"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("my name is Ada")},
	}, onThread)
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(eng.last(t)); got != "system:be brief | user:my name is Ada" {
		t.Fatalf("first turn sent %q", got)
	}
	answer1 := first.OutputText()

	// The second turn, in Anthropic's API, is sent the first.
	c := do(t, http.MethodPost, srv.URL+"/v1/messages", map[string]string{"X-Api-Key": "key-proj", "Anthropic-Version": "2023-06-01",
		"X-Llmgw-Thread": "mixed"}, `{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"what is my name?"}]}`)
	if c.status != 200 || c.body["type"] != "message" {
		t.Fatalf("messages turn on the thread: %d %s", c.status, c.raw)
	}
	want := "system:be brief | user:my name is Ada | assistant:" + answer1 + " | user:what is my name?"
	if got := contents(eng.last(t)); got != want {
		t.Fatalf("messages turn sent %q, want %q", got, want)
	}
	answer2 := c.body["content"].([]any)[0].(map[string]any)["text"].(string)

	// The third, a streamed response, is sent both.
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "big",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")},
	}, onThread)
	var third *responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			r := ev.Response
			third = &r
		}
	}
	if err := stream.Err(); err != nil || third == nil {
		t.Fatalf("streamed response on the thread: %v", err)
	}
	want += " | assistant:" + answer2 + " | user:and then?"
	if got := contents(eng.last(t)); got != want {
		t.Fatalf("streamed turn sent %q, want %q", got, want)
	}
	want += " | assistant:" + third.OutputText()

	// A chat completion on the thread sees all three.
	c = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer key-proj", "X-Llmgw-Thread": "mixed"},
		`{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"last"}]}`)
	if c.status != 200 {
		t.Fatalf("chat turn: %d %s", c.status, c.raw)
	}
	if got := contents(eng.last(t)); got != want+" | user:last" {
		t.Fatalf("chat turn sent %q, want %q", got, want+" | user:last")
	}

	// The streamed response was stored with the conversation it was
	// sent: previous_response_id from it, without the thread, has it.
	if _, err := client.Responses.Get(ctx, third.ID, responses.ResponseGetParams{}); err != nil {
		t.Fatalf("GET of a response made on a thread: %v", err)
	}
	if _, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "big",
		PreviousResponseID: openai.String(third.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("off the thread")},
	}); err != nil {
		t.Fatal(err)
	}
	if got := contents(eng.last(t)); got != want+" | user:off the thread" {
		t.Fatalf("previous_response_id of a thread's response sent %q, want %q", got, want+" | user:off the thread")
	}

	// Both ways of continuing at once: refused, naming the field.
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "big",
		PreviousResponseID: openai.String(third.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("both")},
	}, onThread)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unsupported_value" || apiErr.Param != "previous_response_id" ||
		!strings.Contains(apiErr.Message, "x-llmgw-thread") {
		t.Fatalf("previous_response_id on a thread: %v", err)
	}

	// A project that keeps no conversations: Anthropic's error shape.
	c = do(t, http.MethodPost, srv.URL+"/v1/messages", map[string]string{"X-Api-Key": "key-off", "X-Llmgw-Thread": "t1"},
		`{"model":"big","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	var ae struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(c.raw), &ae); err != nil || c.status != 400 || ae.Type != "error" ||
		ae.Error.Type != "invalid_request_error" || !strings.Contains(ae.Error.Message, "does not keep conversations") {
		t.Fatalf("messages on a thread of a project that keeps none: %d %s", c.status, c.raw)
	}
	stored, err := st.GetThread(ctx, "proj", "mixed", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	_ = json.Unmarshal(stored.Messages, &msgs)
	if len(msgs) != 9 {
		t.Fatalf("the thread holds %d messages, want 9 (a system message and four turns): %s", len(msgs), contents(msgs))
	}
}
