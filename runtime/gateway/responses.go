package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/runtime/apishape"
	"github.com/llmgw/llmgw/runtime/store"
)

// Content is where the gateway keeps the message content a project opted
// in to keeping (stored responses); *store's stores implement it. Nil
// keeps nothing: store is ignored and previous_response_id finds nothing.
type Content interface {
	Retention(ctx context.Context, project, kind string) (int, error)
	PutResponse(ctx context.Context, r store.StoredResponse) error
	GetResponse(ctx context.Context, project, id string, now time.Time) (store.StoredResponse, error)
	DeleteResponse(ctx context.Context, project, id string) error
}

// serveResponses is OpenAI's Responses API (POST /v1/responses),
// translated onto the engine's chat completions.
func (g *Gateway) serveResponses(w http.ResponseWriter, r *http.Request, x *exchange) {
	x.shape = &responsesShape{}
	onThread(r, x)
	g.serve(w, r, x)
}

// responsesShape is one POST /v1/responses.
type responsesShape struct {
	req  *apishape.ResponsesRequest
	meta apishape.ResponseMeta
	// conv is the conversation sent (history and input, without the
	// instructions); retain the hours it is kept when stored.
	conv   []apishape.ChatMessage
	retain int
	body   []byte
}

func previousNotFound(id string) *apiError {
	return newError(http.StatusBadRequest, typeInvalidRequest, "previous_response_not_found",
		fmt.Sprintf("Previous response with id '%s' not found.", id)).withParam("previous_response_id")
}

func (s *responsesShape) toChat(ctx context.Context, g *Gateway, x *exchange, body []byte) ([]byte, *apiError) {
	req, e := apishape.ParseResponses(body)
	if e != nil {
		return nil, fromShapeError(e)
	}
	s.req = req
	project := x.rec.Principal.Project
	content := g.deps.Content
	var history []apishape.ChatMessage
	if id := req.PreviousResponseID; id != "" {
		if content == nil {
			return nil, previousNotFound(id)
		}
		prev, err := content.GetResponse(ctx, project, id, time.Now())
		if errors.Is(err, store.ErrNotFound) {
			return nil, previousNotFound(id)
		}
		if err != nil {
			g.log.Warn("reading stored response", "project", project, "err", err)
			return nil, newError(http.StatusInternalServerError, typeServer, "", "the previous response could not be read; try again")
		}
		if err := json.Unmarshal(prev.History, &history); err != nil {
			g.log.Warn("decoding stored response history", "project", project, "err", err)
			return nil, newError(http.StatusInternalServerError, typeServer, "", "the previous response could not be read")
		}
	}
	if content != nil && (req.Store == nil || *req.Store) {
		hours, err := content.Retention(ctx, project, store.ContentThreads)
		if err != nil {
			g.log.Warn("reading content retention", "project", project, "err", err)
			return nil, newError(http.StatusInternalServerError, typeServer, "", "the project's settings could not be read; try again")
		}
		s.retain = hours
	}
	chat, conv, e := req.ToChat(history)
	if e != nil {
		return nil, fromShapeError(e)
	}
	s.conv = conv
	s.meta = apishape.ResponseMeta{ID: newID("resp_"), CreatedAt: time.Now().Unix(), Model: req.Model, Stored: s.retain > 0}
	return chat, nil
}

func (s *responsesShape) setHeaders(http.Header) {}

func (s *responsesShape) writeError(w http.ResponseWriter, _ *exchange, e *apiError) {
	writeError(w, e)
}

func (s *responsesShape) whole(_ *exchange, res *apishape.Result, _ []byte) []byte {
	s.body = s.req.ResponseFromResult(s.meta, res)
	return s.body
}

func (s *responsesShape) stream(*exchange) shapeStream {
	return &responsesStream{s.req.NewResponsesStream(s.meta), s}
}

// prefixConversation puts a thread's history before the conversation
// stored with the response (a response made on a thread).
func (s *responsesShape) prefixConversation(history []json.RawMessage) {
	var before []apishape.ChatMessage
	for _, m := range history {
		var cm apishape.ChatMessage
		if json.Unmarshal(m, &cm) == nil {
			before = append(before, cm)
		}
	}
	s.conv = append(before, s.conv...)
}

// completed stores the response when the project keeps conversations and
// the request did not say store: false.
func (s *responsesShape) completed(ctx context.Context, g *Gateway, x *exchange, res *apishape.Result) {
	if s.retain <= 0 || g.deps.Content == nil || s.body == nil {
		return
	}
	x.lease.Done() // the answer is whole: the replica is not held while it is stored
	history, err := json.Marshal(append(s.conv, res.Message()))
	if err != nil {
		g.log.Warn("encoding response history", "err", err)
		return
	}
	now := time.Now()
	err = g.deps.Content.PutResponse(context.WithoutCancel(ctx), store.StoredResponse{
		Project: x.rec.Principal.Project, ID: s.meta.ID, Model: x.rec.Model, Body: s.body, History: history,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(s.retain) * time.Hour)})
	if err != nil {
		g.log.Warn("storing response", "project", x.rec.Principal.Project, "err", err)
	}
}

type responsesStream struct {
	*apishape.ResponsesStream
	s *responsesShape
}

func (r *responsesStream) chunk(data []byte) ([]apishape.Event, bool, error) { return r.Chunk(data) }
func (r *responsesStream) finish() []apishape.Event {
	evs := r.Finish()
	r.s.body = r.Final()
	return evs
}
func (r *responsesStream) broken(message string) []apishape.Event { return r.Broken(message) }

func (r *responsesStream) result() *apishape.Result { return r.Result() }
func (r *responsesStream) ended() bool              { return r.Done() }

// serveResponse is GET and DELETE /v1/responses/{id}: a stored response
// of the caller's project. Another project's answers as one that does not
// exist.
func (g *Gateway) serveResponse(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/responses/")
	if id == "" || strings.Contains(id, "/") {
		writeError(w, newError(http.StatusNotFound, typeInvalidRequest, "unknown_url",
			fmt.Sprintf("unknown URL: %s %s (only GET and DELETE /v1/responses/{id} are served)", r.Method, r.URL.Path)))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		methodNotAllowed(w, r, "GET, DELETE")
		return
	}
	p, aerr := g.authenticate(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	notFound := newError(http.StatusNotFound, typeInvalidRequest, "not_found",
		fmt.Sprintf("Response with id '%s' not found.", id)).withParam("response_id")
	content := g.deps.Content
	if content == nil {
		writeError(w, notFound)
		return
	}
	var err error
	var body []byte
	if r.Method == http.MethodGet {
		var sr store.StoredResponse
		sr, err = content.GetResponse(r.Context(), p.Project, id, time.Now())
		body = sr.Body
	} else {
		err = content.DeleteResponse(r.Context(), p.Project, id)
		body, _ = json.Marshal(map[string]any{"id": id, "object": "response.deleted", "deleted": true})
	}
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, notFound)
		return
	}
	if err != nil {
		g.log.Warn("stored response", "method", r.Method, "project", p.Project, "err", err)
		writeError(w, newError(http.StatusInternalServerError, typeServer, "", "the stored response could not be reached; try again"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
