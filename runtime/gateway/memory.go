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

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
)

// Memory notes for agents: what an agent chose to keep, through
// /v1/memory or the MCP server at /mcp (mcp.go). Kept per project and,
// within it, per agent id sent in x-llmgw-agent (a label any key of the
// project may send, not an access boundary); only for a project that
// keeps memory (llmgw keys memory).

const agentHeader = "X-Llmgw-Agent"

// Bounds on notes.
const (
	maxNoteBytes     = 32 << 10
	defaultNoteLimit = 20
	maxNoteLimit     = 100
)

// MemoryContent is what memory notes need of the store.
type MemoryContent interface {
	SaveNote(ctx context.Context, n store.Note, caps store.NoteCaps) (store.Note, error)
	SearchNotes(ctx context.Context, project, agent, query string, now time.Time, limit int) ([]store.Note, error)
	DeleteNote(ctx context.Context, project, agent, id string) error
}

// noteJSON is a note as the API shows it.
type noteJSON struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Agent     string `json:"agent"`
	Text      string `json:"text"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
	ExpiresAt int64  `json:"expires_at"`
}

func toNoteJSON(n store.Note) noteJSON {
	return noteJSON{ID: n.ID, Object: "memory.note", Agent: n.Agent, Text: n.Text,
		CreatedAt: n.CreatedAt.Unix(), UpdatedAt: n.UpdatedAt.Unix(), ExpiresAt: n.ExpiresAt.Unix()}
}

// notes does what both /v1/memory and the MCP tools do, for one project
// and agent.
type notes struct {
	g       *Gateway
	project string
	agent   string
}

// errNote is a refusal the client should see: a status and code.
type errNote struct {
	status  int
	code    string
	message string
}

func (e *errNote) Error() string { return e.message }

func (g *Gateway) notesFor(p request.Principal, agent string) (*notes, error) {
	if agent != "" && !validRequestID(agent) {
		return nil, &errNote{http.StatusBadRequest, "invalid_agent", "x-llmgw-agent must be 1 to 128 letters, digits, '-', '_' or '.'"}
	}
	return &notes{g: g, project: p.Project, agent: agent}, nil
}

func (n *notes) store() MemoryContent {
	mc, _ := n.g.deps.Content.(MemoryContent)
	return mc
}

// retention returns the project's memory retention, refusing when it
// keeps none.
func (n *notes) retention(ctx context.Context) (int, error) {
	off := &errNote{http.StatusBadRequest, "memory_off", fmt.Sprintf(
		"project %q does not keep memory notes; an operator turns them on with llmgw keys memory --project %s --retain-hours N", n.project, n.project)}
	if n.store() == nil {
		return 0, off
	}
	hours, err := n.g.deps.Content.Retention(ctx, n.project, store.ContentMemory)
	if err != nil {
		n.g.log.Warn("reading content retention", "project", n.project, "err", err)
		return 0, errors.New("the project's settings could not be read; try again")
	}
	if hours <= 0 {
		return 0, off
	}
	return hours, nil
}

// save keeps a note: a new one, or the note id names (replaced).
func (n *notes) save(ctx context.Context, id, text string) (store.Note, error) {
	hours, err := n.retention(ctx)
	if err != nil {
		return store.Note{}, err
	}
	if strings.TrimSpace(text) == "" {
		return store.Note{}, &errNote{http.StatusBadRequest, "invalid_value", "text must not be empty"}
	}
	if len(text) > maxNoteBytes {
		return store.Note{}, &errNote{http.StatusBadRequest, "invalid_value", fmt.Sprintf("text is %d bytes; a note holds at most %d", len(text), maxNoteBytes)}
	}
	if id == "" {
		id = newID("note_")
	} else if !validRequestID(id) {
		return store.Note{}, &errNote{http.StatusBadRequest, "invalid_value", "id must be 1 to 128 letters, digits, '-', '_' or '.'"}
	}
	now := time.Now().UTC().Truncate(time.Second)
	note, err := n.store().SaveNote(ctx, store.Note{Project: n.project, Agent: n.agent, ID: id, Text: text,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Duration(hours) * time.Hour)},
		store.NoteCaps{PerAgent: n.g.cfg.MaxNotesPerAgent, PerProject: n.g.cfg.MaxNotesPerProject})
	if ce, ok := errors.AsType[*store.NoteCapError](err); ok {
		if ce.PerAgent {
			return store.Note{}, &errNote{http.StatusBadRequest, "too_many_notes", fmt.Sprintf(
				"agent %q of project %q holds %d notes, the most one agent may keep (limits.max_notes_per_agent); forget some, or replace one by its id",
				n.agent, n.project, ce.Held)}
		}
		return store.Note{}, &errNote{http.StatusBadRequest, "too_many_notes", fmt.Sprintf(
			"project %q holds %d notes over all its agents, the most one project may keep (limits.max_notes_per_project); forget some, or replace one by its id",
			n.project, ce.Held)}
	}
	if err != nil {
		n.g.log.Warn("storing note", "project", n.project, "err", err)
		return store.Note{}, errors.New("the note could not be stored; try again")
	}
	return note, nil
}

// search finds notes holding every word of query, newest first.
func (n *notes) search(ctx context.Context, query string, limit int) ([]store.Note, error) {
	if _, err := n.retention(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = defaultNoteLimit
	}
	limit = min(limit, maxNoteLimit)
	found, err := n.store().SearchNotes(ctx, n.project, n.agent, query, time.Now(), limit)
	if err != nil {
		n.g.log.Warn("searching notes", "project", n.project, "err", err)
		return nil, errors.New("the notes could not be searched; try again")
	}
	return found, nil
}

// forget deletes a note. Whether memory is on or not, a note that is not
// the agent's answers as one that does not exist.
func (n *notes) forget(ctx context.Context, id string) error {
	notFound := &errNote{http.StatusNotFound, "not_found", fmt.Sprintf("note %q not found", id)}
	if n.store() == nil || !validRequestID(id) {
		return notFound
	}
	err := n.store().DeleteNote(ctx, n.project, n.agent, id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound
	}
	if err != nil {
		n.g.log.Warn("deleting note", "project", n.project, "err", err)
		return errors.New("the note could not be deleted; try again")
	}
	return nil
}

// noteError renders a notes error in OpenAI's shape.
func noteError(err error) *apiError {
	if e, ok := errors.AsType[*errNote](err); ok {
		return newError(e.status, typeInvalidRequest, e.code, e.message)
	}
	return newError(http.StatusInternalServerError, typeServer, "", err.Error())
}

func writeJSONBody(w http.ResponseWriter, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// serveMemory is /v1/memory (POST saves, GET searches) and
// /v1/memory/{id} (DELETE forgets).
func (g *Gateway) serveMemory(w http.ResponseWriter, r *http.Request) {
	id, hasID := strings.CutPrefix(r.URL.Path, "/v1/memory/")
	switch {
	case hasID && r.Method != http.MethodDelete:
		methodNotAllowed(w, r, http.MethodDelete)
		return
	case !hasID && r.Method != http.MethodPost && r.Method != http.MethodGet:
		methodNotAllowed(w, r, "GET, POST")
		return
	}
	p, aerr := g.authenticate(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := g.limitRequest(r.Context(), w.Header(), p); aerr != nil {
		g.closeUnread(w, r)
		writeError(w, aerr)
		return
	}
	n, err := g.notesFor(p, r.Header.Get(agentHeader))
	if err != nil {
		writeError(w, noteError(err))
		return
	}
	switch {
	case hasID:
		if err := n.forget(r.Context(), id); err != nil {
			writeError(w, noteError(err))
			return
		}
		writeJSONBody(w, map[string]any{"id": id, "object": "memory.note.deleted", "deleted": true})
	case r.Method == http.MethodGet:
		limit := 0
		if l := r.URL.Query().Get("limit"); l != "" {
			v, err := strconv.Atoi(l)
			if err != nil || v < 1 || v > maxNoteLimit {
				writeError(w, newError(http.StatusBadRequest, typeInvalidRequest, "invalid_value",
					fmt.Sprintf("limit must be an integer from 1 to %d, got %q", maxNoteLimit, l)).withParam("limit"))
				return
			}
			limit = v
		}
		found, err := n.search(r.Context(), r.URL.Query().Get("q"), limit)
		if err != nil {
			writeError(w, noteError(err))
			return
		}
		data := make([]noteJSON, 0, len(found))
		for _, f := range found {
			data = append(data, toNoteJSON(f))
		}
		writeJSONBody(w, map[string]any{"object": "list", "data": data})
	default:
		body, aerr := g.readBodyInTime(w, r)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		var in struct {
			ID   string `json:"id"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			writeError(w, badJSON("request body must be a JSON object with text (and optionally id): %v", err))
			return
		}
		note, err := n.save(r.Context(), in.ID, in.Text)
		if err != nil {
			writeError(w, noteError(err))
			return
		}
		writeJSONBody(w, toNoteJSON(note))
	}
}

// limitRequest counts a request that reaches no engine against the key's
// and the project's requests per minute, when admission limits them
// (RequestLimiter); it sets the rate headers on h.
func (g *Gateway) limitRequest(ctx context.Context, h http.Header, p request.Principal) *apiError {
	rl, ok := g.deps.Admission.(RequestLimiter)
	if !ok {
		return nil
	}
	rh, err := rl.LimitRequest(ctx, p)
	if err != nil {
		if rej, ok := errors.AsType[*request.Rejection](err); ok {
			for k, v := range rej.Header {
				h[k] = v
			}
			return newError(rej.Status, rej.Type, rej.Code, rej.Message).withRetryAfter(rej.RetryAfter)
		}
		g.log.Warn("limiting request", "project", p.Project, "err", err)
		return newError(http.StatusInternalServerError, typeServer, "", "the request could not be admitted; try again")
	}
	for k, v := range rh {
		h[k] = v
	}
	return nil
}
