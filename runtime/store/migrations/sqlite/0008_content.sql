-- Message content at rest, kept only for a project that opted in with a
-- retention: how long each kind is kept ("threads": conversations and
-- stored responses; "memory": agents' notes), and the responses the
-- Responses API stored (store: true) for a later previous_response_id.
-- A row past expires_at is never read, and the hourly prune deletes it.

CREATE TABLE content_retention (
    project      TEXT NOT NULL,
    kind         TEXT NOT NULL,
    retain_hours BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (project, kind)
);

CREATE TABLE stored_responses (
    project    TEXT NOT NULL,
    id         TEXT NOT NULL,
    model      TEXT NOT NULL,
    body       TEXT NOT NULL,
    history    TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (project, id)
);
CREATE INDEX stored_responses_expires ON stored_responses (expires_at);

-- Threads: a conversation a client continues by id (x-llmgw-thread); its
-- messages as the chat messages a next turn sends (JSON). The retention
-- runs from the last turn.
CREATE TABLE threads (
    project    TEXT NOT NULL,
    id         TEXT NOT NULL,
    messages   TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (project, id)
);
CREATE INDEX threads_expires ON threads (expires_at);

-- Memory notes: what an agent chose to keep, private to its project and
-- agent id. The retention runs from the last write to the note.
CREATE TABLE memory_notes (
    project    TEXT NOT NULL,
    agent      TEXT NOT NULL,
    id         TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (project, agent, id)
);
CREATE INDEX memory_notes_expires ON memory_notes (expires_at);
