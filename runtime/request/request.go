// Package request is the vocabulary of one client request that the parts
// of the request path share: who made it (Principal), what admission may
// know of it before it runs (Info, and the bounds on what it may ask for),
// its claim on limits and budgets (Ticket) or its refusal (Rejection), what
// it used (Usage), and the Record of it once it has ended.
//
// The gateway makes and reads these; auth (Principal), tenancy (admission
// and the usage recorder) and metrics implement the gateway's interfaces in
// these terms, so none of them imports the gateway. Types only, and the
// one rule every side must count alike (EstimatePromptTokens).
package request

import (
	"errors"
	"net/http"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// Principal is who a request is made by.
type Principal struct {
	// KeyID identifies the API key (never the key itself).
	KeyID string
	// Project is the project the key belongs to.
	Project string
	// RPM and TPM are the key's own limits; zero means "not set".
	RPM, TPM int64
}

// ErrUnauthenticated is what authenticating a missing, unknown or revoked
// key returns (wrapped or not).
var ErrUnauthenticated = errors.New("unauthenticated")

// Info is what admission may know about a request before it runs.
type Info struct {
	// Endpoint is the API path, e.g. "/v1/chat/completions".
	Endpoint string
	// Stream is whether the client asked for a streamed response.
	Stream bool
	// MaxTokens is max_completion_tokens, else max_tokens; 0 when unset.
	MaxTokens int
	// N is the number of choices asked for; 0 when unset.
	N int
	// BestOf is the completions generated per prompt to pick the best
	// from (/v1/completions); 0 when unset.
	BestOf int
	// Prompts is the number of prompts (/v1/completions takes a list);
	// 0 or 1 means one.
	Prompts int
	// BodyBytes is the size of the request body.
	BodyBytes int
	// PromptEstimate is the gateway's upper bound of the prompt's tokens,
	// made before the engine has counted them (see EstimatePromptTokens).
	PromptEstimate int
	// Model is the catalog's entry of the model asked for, as the gateway
	// looked it up; admission takes its terms from here rather than asking
	// the catalog again. A zero Model (Name "") leaves admission to look
	// the model up itself.
	Model Model
}

// Model is what the request path needs of one catalog model: looked up
// once per request (the gateway resolves the name the client sent) and
// carried on the request, so that admission, settlement and the usage
// record do not consult the catalog again.
type Model struct {
	// Name is the model's canonical name.
	Name string
	// Aliases are the other names that resolve to Name. Shared with the
	// catalog: read only.
	Aliases []string
	// Price is the model's own price; nil when it has none (the default
	// price applies). Shared with the catalog: read only.
	Price *spec.Pricing
	// Limits are its max_output and context_length.
	Limits Limits
}

// Known reports whether name is the model's name or one of its aliases.
func (m Model) Known(name string) bool {
	if name == m.Name {
		return name != ""
	}
	for _, a := range m.Aliases {
		if a == name {
			return true
		}
	}
	return false
}

// PromptTemplateAllowance is what EstimatePromptTokens adds to a body's
// own size for the text an engine's chat template puts around the
// messages: a default system prompt, tool-calling instructions, turn
// markers (Qwen2.5's and Llama 3.1's come to about 120 tokens with tools).
const PromptTemplateAllowance = 256

// EstimatePromptTokens bounds the prompt tokens of a request body before
// an engine has tokenized it, from above: one token per byte of the body
// plus PromptTemplateAllowance. Byte-level BPE tokenizers (GPT-2, Llama 3,
// Qwen) and SentencePiece with byte fallback never make more tokens of a
// text than it has UTF-8 bytes, and the body holds every byte of the
// prompt's text plus at least the JSON quoting around it (escapes only
// make it longer), which pays for a SentencePiece word-start marker and a
// chat template's per-message markers. A prompt given as token ids takes
// at least two bytes an id ("7,"), so it is half the bytes plus the
// allowance. Admission caps the bound at the model's context_length (an
// engine refuses a longer prompt) and never charges more than it
// reserved, so a prompt that counts more (an image given by URL) is
// charged at most the bound.
func EstimatePromptTokens(bodyBytes int, tokenIDs bool) int {
	if tokenIDs {
		return (bodyBytes+1)/2 + PromptTemplateAllowance
	}
	return bodyBytes + PromptTemplateAllowance
}

// TypicalPromptTokens is what a prompt of bodyBytes of request body is
// billed when the engine reported no count (a stream the client left, or
// one cut at its bound): about four bytes a token for text, six for token
// ids ("12345,"), never more than the bound EstimatePromptTokens reserves.
// The bound is for reservations only: billed, it would charge several
// times what the engine counted.
func TypicalPromptTokens(bodyBytes int, tokenIDs bool) int {
	n := bodyBytes / 4
	if tokenIDs {
		n = bodyBytes / 6
	}
	return min(max(n, 1), EstimatePromptTokens(bodyBytes, tokenIDs))
}

// Usage is the token usage the engine reported for a request.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
	// Reported is false when the engine reported no usage (for example the
	// request failed or the client went away).
	Reported bool
	// Estimated is true when the engine reported nothing but the gateway
	// relayed output anyway (a stream the client abandoned): the completion
	// count is the number of content events relayed and the prompt count
	// the gateway's estimate.
	Estimated bool
	// Abandoned is true when the client left after the request reached the
	// engine and before anything could be counted (a non-streamed request,
	// or a stream before its first event): the engine may have worked, so
	// admission charges the request's whole reservation.
	Abandoned bool
	// Priced is set by admission's Settle, with Cost what it charged the
	// project's budgets for the request: the usage row records that cost,
	// not the tokens re-priced later at a price that may have changed.
	Priced bool
	Cost   float64
	// Admitted is when admission admitted the request (set by Settle): the
	// usage row is dated then, so its cost counts in the budget period
	// that reserved it, however long the request ran.
	Admitted time.Time
}

// Limits are what one response of a model may hold, from its catalog
// definition; 0 means unstated. The gateway refuses a request that asks
// for more, and admission never reserves more.
type Limits struct {
	// MaxOutput is the model's max_output: completion tokens per choice.
	MaxOutput int
	// ContextLength is the model's context_length: prompt and completion
	// together.
	ContextLength int
}

// Completion is the most completion tokens one choice may have: MaxOutput,
// else ContextLength (the completion cannot outgrow the context), else 0
// when neither is stated.
func (l Limits) Completion() int {
	if l.MaxOutput > 0 {
		return l.MaxOutput
	}
	return max(l.ContextLength, 0)
}

// Bounds on what one request may ask for; beyond them the gateway refuses
// it before anything is reserved, so admission's arithmetic stays small.
const (
	// MaxTokens bounds max_tokens (and max_completion_tokens).
	MaxTokens = 1 << 24
	// MaxChoices bounds n and best_of.
	MaxChoices = 128
)

// Ticket is an admitted request's claim on limits and budgets.
type Ticket interface {
	// Model is the canonical model to serve: the one asked for, or the
	// fallback a spent budget names.
	Model() string
	// MaxTokens is the completion tokens per choice the reservation
	// covers; the gateway forwards it as the request's max_tokens, so the
	// engine cannot generate more than was reserved. 0 when the ticket
	// reserves no completion (embeddings, or an admission that counts
	// nothing): the request is then forwarded with the client's own bound.
	MaxTokens() int
	// SetHeaders adds the admission's response headers (x-ratelimit-*).
	SetHeaders(h http.Header)
	// Settle is called exactly once when the request has ended, with what
	// it actually used, and returns what it was charged (the usage itself,
	// or the reservation for an abandoned request).
	Settle(usage Usage) Usage
}

// Rejection is an admission refusal the client should see, e.g. 429 with a
// Retry-After for a rate limit or 402 for a spent budget.
type Rejection struct {
	Status     int
	Type       string
	Code       string
	Message    string
	RetryAfter time.Duration
	// Reason is the admission outcome metrics count it under ("limit",
	// "budget", "model_not_allowed"); Code when empty.
	Reason string
	// Header holds extra response headers (x-ratelimit-*); may be nil.
	Header http.Header
}

// Error implements error: the message the client sees.
func (r *Rejection) Error() string { return r.Message }

// Record is what the gateway reports about one finished request, whether
// it was authenticated, admitted and served or not.
type Record struct {
	Principal Principal
	// Model is the canonical model name served (a budget's fallback when
	// one applied); empty when it was not resolved.
	Model string
	// Requested is the canonical model asked for when a fallback replaced
	// it; empty otherwise.
	Requested string
	// Admission is why admission refused the request ("limit", "budget",
	// ...); empty when it was admitted or never reached admission.
	Admission string
	// Endpoint is the API path.
	Endpoint  string
	RequestID string
	// ReplicaID is the replica that served it; empty when none was picked.
	ReplicaID string
	// Status is the HTTP status sent to the client (499 when the client
	// went away before a response was sent).
	Status           int
	PromptTokens     int
	CompletionTokens int
	// UsageReported is false when the engine reported no usage.
	UsageReported bool
	// UsageEstimated is true when the token counts are the gateway's
	// estimate of an abandoned stream (see Usage.Estimated).
	UsageEstimated bool
	// Priced is set when admission charged the request; Cost is then what
	// it charged (Usage.Cost).
	Priced bool
	Cost   float64
	// Admitted is Usage.Admitted: when set, the usage row's time.
	Admitted time.Time
	Latency  time.Duration
	// TTFT is the time to the first streamed event; zero when not streamed.
	TTFT time.Duration
	// Own is the gateway's own time before the client's first byte: from
	// arrival to the request handed to the engine (the one that answered,
	// so a replica that failed first counts, and so does an engine's
	// refusal of a thread's length before the shorter body was sent),
	// plus from the engine's answer in hand (a stream's first event, a
	// whole answer) to the client's first byte sent. It leaves out the
	// engine's time; zero when no engine answered, or when the gateway
	// answered in its stead (an engine's refusal on a translated route,
	// sent in that route's error shape).
	Own    time.Duration
	Stream bool
}
