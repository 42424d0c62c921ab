package gateway

// What the gateway needs of the rest of the control plane, as interfaces
// only the gateway uses. The types they speak (who made a request, what it
// used, its ticket and record) are package request's, so that auth,
// tenancy and metrics implement these without importing the gateway.

import (
	"context"
	"net/http"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

// ModelInfo describes one catalog model as /v1/models lists it.
type ModelInfo struct {
	// ID is the canonical model name.
	ID string
	// Aliases are other names that resolve to ID.
	Aliases []string
	// Created is the Unix time the model entered the catalog.
	Created int64
	// OwnedBy is shown as owned_by.
	OwnedBy string
}

// Catalog resolves the model names clients send.
type Catalog interface {
	// Lookup resolves a canonical name or an alias and returns what the
	// request path needs of the model (its canonical name, aliases, own
	// price, and the limits a request asking for more is refused by). A
	// request is looked up once: the gateway carries the result to
	// admission (request.Info.Model), which does not look again.
	Lookup(name string) (request.Model, bool)
	// List returns the catalog's models.
	List() []ModelInfo
}

// Auth authenticates API keys.
type Auth interface {
	// Authenticate returns the principal of a bearer token. It returns an
	// error wrapping request.ErrUnauthenticated when the token is not a valid key;
	// any other error is reported to the client as a server error.
	Authenticate(ctx context.Context, bearer string) (request.Principal, error)
}

// Admission decides whether a principal may run a request now: rate limits
// and budget reservations. It runs after the model is resolved and before a
// replica is picked.
type Admission interface {
	// Admit returns a ticket to settle when the request ends, or an error.
	// A *request.Rejection error is sent to the client as it says; any other error
	// is a server error.
	Admit(ctx context.Context, p request.Principal, model string, req request.Info) (request.Ticket, error)
}

// RequestLimiter is implemented by an Admission that also limits the
// requests that reach no engine (memory notes, /mcp): each counts as one
// request against the key's and the project's requests per minute. It
// returns the rate headers to send, or a *request.Rejection.
type RequestLimiter interface {
	LimitRequest(ctx context.Context, p request.Principal) (http.Header, error)
}

// ModelFilter is implemented by an Admission that limits which models a
// principal may use; /v1/models then lists only those.
type ModelFilter interface {
	Allows(ctx context.Context, p request.Principal, model string) bool
}

// AdmitAll is the Admission that admits everything and settles nothing.
type AdmitAll struct{}

// Admit implements Admission.
func (AdmitAll) Admit(_ context.Context, _ request.Principal, model string, _ request.Info) (request.Ticket, error) {
	return PlainTicket(model), nil
}

// PlainTicket is a request.Ticket that serves the model asked for, adds no headers
// and settles nothing.
type PlainTicket string

// Model implements request.Ticket.
func (t PlainTicket) Model() string { return string(t) }

// SetHeaders implements request.Ticket.
func (PlainTicket) SetHeaders(http.Header) {}

// MaxTokens implements request.Ticket: it reserves nothing, so the request
// goes with the client's own bound.
func (PlainTicket) MaxTokens() int { return 0 }

// Settle implements request.Ticket.
func (PlainTicket) Settle(u request.Usage) request.Usage { return u }

// Routes picks a replica endpoint for a canonical model; *router.Router
// implements it.
type Routes interface {
	// Pick chooses an endpoint for model; key is text whose shared prefixes
	// should meet on one replica, or "".
	Pick(model, key string) (router.Lease, error)
	// Route chooses an endpoint for model among those req does not
	// exclude, keeping prompts that share a prefix together (req.Key).
	Route(model string, req router.Request) (router.Lease, error)
	// Wait blocks until model has a ready endpoint or ctx ends.
	Wait(ctx context.Context, model string) error
}

var _ Routes = (*router.Router)(nil)

// Observer receives a Record for every inference request, authenticated or
// not, once it has ended. It is called on the request's goroutine and must
// not block.
type Observer interface {
	Observe(request.Record)
}

// Observers sends each Record to every Observer in turn.
type Observers []Observer

// Observe implements Observer.
func (os Observers) Observe(r request.Record) {
	for _, o := range os {
		o.Observe(r)
	}
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(request.Record)

// Observe implements Observer.
func (f ObserverFunc) Observe(r request.Record) { f(r) }
