package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/llmgw/runtime/request"
)

// The MCP server at /mcp: memory notes as the tools remember, recall and
// forget, over the streamable HTTP transport of the official Go SDK,
// authenticated with the project's API key as a bearer token. Stateless:
// every request carries its key and x-llmgw-agent.

type rememberIn struct {
	Text string `json:"text" jsonschema:"what to remember"`
	ID   string `json:"id,omitempty" jsonschema:"the id of a note to replace; a new note when empty"`
}

type noteOut struct {
	ID        string `json:"id"`
	Text      string `json:"text"`
	UpdatedAt string `json:"updated_at"`
}

type recallIn struct {
	Query string `json:"query,omitempty" jsonschema:"words every note found holds (ASCII letters in any case); all notes when empty"`
	Limit int    `json:"limit,omitempty" jsonschema:"the most notes to return, newest first (default 20, at most 100)"`
}

type recallOut struct {
	Notes []noteOut `json:"notes"`
}

type forgetIn struct {
	ID string `json:"id" jsonschema:"the id of the note to delete"`
}

type forgetOut struct {
	Deleted string `json:"deleted"`
}

// mcpNotes returns the notes of the request's key and agent.
func (g *Gateway) mcpNotes(extra *mcp.RequestExtra) (*notes, error) {
	if extra == nil || extra.TokenInfo == nil {
		return nil, errors.New("not authenticated")
	}
	project, _ := extra.TokenInfo.Extra["project"].(string)
	agent := ""
	if extra.Header != nil {
		agent = extra.Header.Get(agentHeader)
	}
	return g.notesFor(request.Principal{KeyID: extra.TokenInfo.UserID, Project: project}, agent)
}

func toNoteOut(id, text string, updated time.Time) noteOut {
	return noteOut{ID: id, Text: text, UpdatedAt: updated.UTC().Format(time.RFC3339)}
}

func (g *Gateway) newMCPServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "llmgw-memory", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "remember", Description: "Keep a note for later conversations: a new one, or replace the note id names."},
		func(ctx context.Context, req *mcp.CallToolRequest, in rememberIn) (*mcp.CallToolResult, noteOut, error) {
			n, err := g.mcpNotes(req.Extra)
			if err != nil {
				return nil, noteOut{}, err
			}
			note, err := n.save(ctx, in.ID, in.Text)
			if err != nil {
				return nil, noteOut{}, err
			}
			return nil, toNoteOut(note.ID, note.Text, note.UpdatedAt), nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "recall", Description: "Find kept notes holding every word of the query, newest first."},
		func(ctx context.Context, req *mcp.CallToolRequest, in recallIn) (*mcp.CallToolResult, recallOut, error) {
			n, err := g.mcpNotes(req.Extra)
			if err != nil {
				return nil, recallOut{}, err
			}
			found, err := n.search(ctx, in.Query, in.Limit)
			if err != nil {
				return nil, recallOut{}, err
			}
			out := recallOut{Notes: []noteOut{}}
			for _, f := range found {
				out.Notes = append(out.Notes, toNoteOut(f.ID, f.Text, f.UpdatedAt))
			}
			return nil, out, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "forget", Description: "Delete a kept note by its id."},
		func(ctx context.Context, req *mcp.CallToolRequest, in forgetIn) (*mcp.CallToolResult, forgetOut, error) {
			n, err := g.mcpNotes(req.Extra)
			if err != nil {
				return nil, forgetOut{}, err
			}
			if err := n.forget(ctx, in.ID); err != nil {
				return nil, forgetOut{}, err
			}
			return nil, forgetOut{Deleted: in.ID}, nil
		})
	return s
}

// mcpHandler serves /mcp: the key checked by the SDK's bearer middleware
// with the gateway's authenticator, then the streamable HTTP transport.
func (g *Gateway) mcpHandler() http.Handler {
	server := g.newMCPServer()
	// The SDK's DNS-rebinding check (a loopback listener and a Host that
	// is not loopback: 403) is off: it protects servers that trust the
	// browser's origin, and every request here must bring the project's
	// key, which a rebound page does not have; it would refuse every
	// client behind a reverse proxy on the same host.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, DisableLocalhostProtection: true})
	verify := func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		if g.deps.Auth == nil {
			return nil, fmt.Errorf("no authenticator is configured: %w", auth.ErrInvalidToken)
		}
		p, err := g.deps.Auth.Authenticate(ctx, token)
		if errors.Is(err, request.ErrUnauthenticated) {
			return nil, fmt.Errorf("invalid API key: %w", auth.ErrInvalidToken)
		}
		if err != nil {
			g.log.Warn("authenticating request", "err", err)
			return nil, err
		}
		if f, ok := r.Context().Value(connAuthKey{}).(func()); ok {
			f()
		}
		return &auth.TokenInfo{UserID: p.KeyID, Extra: map[string]any{"project": p.Project, "principal": p}}, nil
	}
	// Each request counts against the key's and project's requests per
	// minute, as /v1/memory's do.
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
			p, _ := ti.Extra["principal"].(request.Principal)
			if aerr := g.limitRequest(r.Context(), w.Header(), p); aerr != nil {
				g.closeUnread(w, r)
				writeError(w, aerr)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
	authed := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(limited)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get(agentHeader); a != "" && !validRequestID(strings.TrimSpace(a)) {
			writeError(w, newError(http.StatusBadRequest, typeInvalidRequest, "invalid_agent",
				"x-llmgw-agent must be 1 to 128 letters, digits, '-', '_' or '.'"))
			return
		}
		authed.ServeHTTP(w, r)
	})
}
