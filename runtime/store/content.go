package store

import (
	"context"
	"fmt"
	"time"
)

// Kinds of message content a project may keep, each with its own
// retention.
const (
	// ContentThreads covers conversations: threads and the responses the
	// Responses API stores.
	ContentThreads = "threads"
	// ContentMemory covers agents' memory notes.
	ContentMemory = "memory"
)

// MaxRetainHours is the longest retention a project may set: ten years.
// (Hours far beyond it would overflow the times computed from them.)
const MaxRetainHours = 87600

// StoredResponse is one answer of the Responses API kept for a later
// turn (previous_response_id) and for GET /v1/responses/{id}. Body is the
// response object as the client saw it; History is the conversation up
// to and including this answer, as the chat messages a next turn sends
// (JSON). Both are message content.
type StoredResponse struct {
	Project   string
	ID        string
	Model     string
	Body      []byte
	History   []byte
	CreatedAt time.Time
	ExpiresAt time.Time
}

// ContentStore keeps the only message content llmgw stores, and only for
// projects that opted in with a retention.
type ContentStore interface {
	// SetRetention sets how many hours a project keeps one kind of
	// content (ContentThreads, ContentMemory); 0 turns it off, after
	// which nothing new is stored and the prune deletes what was. A
	// project that does not exist returns an error wrapping ErrNotFound.
	SetRetention(ctx context.Context, project, kind string, hours int) error
	// Retention returns the project's retention for the kind in hours, 0
	// when it is off.
	Retention(ctx context.Context, project, kind string) (int, error)
	// PutResponse stores a response.
	PutResponse(ctx context.Context, r StoredResponse) error
	// GetResponse returns a project's response unless it expired before
	// now, by its expiry or by the project's retention as it is now
	// counted from when it was written (a retention cut short or turned
	// off ends access at once); another project's, an expired one and an unknown id all
	// return an error wrapping ErrNotFound.
	GetResponse(ctx context.Context, project, id string, now time.Time) (StoredResponse, error)
	// DeleteResponse deletes a project's response, or returns an error
	// wrapping ErrNotFound.
	DeleteResponse(ctx context.Context, project, id string) error
	// GetThread returns a project's thread unless it expired before now
	// (as GetResponse says); another project's, an expired one and an
	// unknown id all return an error wrapping ErrNotFound.
	GetThread(ctx context.Context, project, id string, now time.Time) (Thread, error)
	// ThreadSize returns the size in bytes of the messages of a
	// project's thread GetThread would return, without reading them (the
	// database keeps a value's length beside it), so that a request is
	// admitted before its thread is read; ErrNotFound as GetThread.
	ThreadSize(ctx context.Context, project, id string, now time.Time) (int64, error)
	// PutThread stores a thread's messages, and the key of the request
	// that stored its last turn (turnKey, "" for none), if the thread is
	// as the caller read it: prev is the Revision GetThread returned, 0
	// when it found none. When another write came between (or the thread
	// was deleted, or one was begun meanwhile) it writes nothing and
	// returns an error wrapping ErrConflict. It returns the new revision.
	PutThread(ctx context.Context, project, id string, messages []byte, expires time.Time, prev int64, turnKey string) (int64, error)
	// DeleteThread deletes a project's thread, or returns an error
	// wrapping ErrNotFound.
	DeleteThread(ctx context.Context, project, id string) error

	// PutNote creates a memory note or replaces its text.
	PutNote(ctx context.Context, n Note) error
	// SaveNote creates a note, or replaces the text of the agent's note
	// of the same id, unless a new note would leave the agent holding
	// more than caps.PerAgent unexpired notes (as GetResponse says, at
	// n.UpdatedAt) or the project more than caps.PerProject (0: no
	// bound); then it writes nothing and returns a *NoteCapError.
	// Replacing an unexpired note adds nothing and is never refused, even
	// under caps lowered below what is held. The
	// count and the write are one transaction under a lock on the
	// project's notes, so notes saved at once never pass a bound. It
	// returns the note as stored (a replaced note keeps its CreatedAt).
	SaveNote(ctx context.Context, n Note, caps NoteCaps) (Note, error)
	// SearchNotes returns a project's agent's unexpired notes (as
	// GetResponse says) whose text
	// holds every word of query (case-insensitive for ASCII letters, and
	// for others as far as the database's LOWER folds them; all notes
	// when query is empty), most recently written first, at most limit.
	SearchNotes(ctx context.Context, project, agent, query string, now time.Time, limit int) ([]Note, error)
	// CountNotes returns how many unexpired notes (as GetResponse says)
	// the project's agent holds, and the whole project, other than the
	// agent's note except names ("" for none): what a new note, or one
	// replacing except, would add to.
	CountNotes(ctx context.Context, project, agent, except string, now time.Time) (agentNotes, projectNotes int, err error)
	// DeleteNote deletes a note of the project's agent, or returns an
	// error wrapping ErrNotFound.
	DeleteNote(ctx context.Context, project, agent, id string) error

	// PruneContent deletes what the reads no longer return at now:
	// content expired, past its project's current retention, or of a
	// kind its project turned off; it returns how many rows went.
	PruneContent(ctx context.Context, now time.Time) (int64, error)
}

// Thread is a stored conversation: its messages as the chat messages a
// next turn sends (JSON), its revision, which every write changes, and
// the key of the request that stored its last turn.
type Thread struct {
	Messages []byte
	Revision int64
	// TurnKey is the key PutThread was given with the last turn ("" for
	// none, and when a write that set no key came after it: an older
	// release's, during a rolling upgrade).
	TurnKey string
}

// NoteCaps bound the notes SaveNote keeps; 0 is no bound.
type NoteCaps struct {
	PerAgent, PerProject int
}

// NoteCapError is SaveNote's refusal of a new note past a bound.
type NoteCapError struct {
	Project, Agent string
	// Agent's bound (else the project's), the notes held and the bound.
	PerAgent  bool
	Held, Cap int
}

func (e *NoteCapError) Error() string {
	if e.PerAgent {
		return fmt.Sprintf("agent %q of project %q holds %d notes, its bound", e.Agent, e.Project, e.Held)
	}
	return fmt.Sprintf("project %q holds %d notes over all its agents, its bound", e.Project, e.Held)
}

// Note is a memory note an agent kept.
type Note struct {
	Project   string
	Agent     string
	ID        string
	Text      string
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
}
