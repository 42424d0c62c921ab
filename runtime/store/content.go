package store

import (
	"context"
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
	// GetThread returns a project's thread's messages (JSON) unless it
	// expired before now (as GetResponse says); another project's, an expired one and an
	// unknown id all return an error wrapping ErrNotFound.
	GetThread(ctx context.Context, project, id string, now time.Time) ([]byte, error)
	// PutThread creates or replaces a thread's messages.
	PutThread(ctx context.Context, project, id string, messages []byte, expires time.Time) error
	// DeleteThread deletes a project's thread, or returns an error
	// wrapping ErrNotFound.
	DeleteThread(ctx context.Context, project, id string) error

	// PutNote creates a memory note or replaces its text.
	PutNote(ctx context.Context, n Note) error
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
