package simengine

import (
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// defaultCompletionTokens is the completion length when a request sets no
// max_tokens.
const defaultCompletionTokens = 16

// vocabulary is the fixed, read-only word list completions are drawn from.
var vocabulary = strings.Fields(`
	the of and to in is was that for on with as by at from his her they
	this be are have not but had which one you were all their there an
	she been has would when who will more no if out so said what up its
	about into than them can only other new some could time these two may
	then do first any my now such like our over man me even most made after
	also did many before must through back years where much your way well
	down should because each just those people how too little state good
	very make world still own see men work long get here between both life
	being under never day same another know while last might us great old
	year off come since against go came right used take three river stone
	light water green signal kernel tensor shard fabric replica node queue
	token cache block prefix engine model weight layer vector matrix cluster
	north south east west morning evening winter summer quiet bright narrow
	open closed simple steady rapid gentle distant near`)

// tokenize cuts text into the simulated tokens: whitespace-separated words.
func tokenize(text string) []string {
	return strings.Fields(text)
}

// hashTokens is the seed that makes output a function of the prompt alone.
func hashTokens(tokens []string) uint64 {
	h := fnv.New64a()
	for _, t := range tokens {
		h.Write([]byte(t))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// hashString hashes arbitrary text, e.g. an embedding input.
func hashString(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// wordSource draws the deterministic pseudo-random completion words for one
// prompt.
type wordSource struct {
	rng *rand.Rand
}

func newWordSource(seed uint64) *wordSource {
	return &wordSource{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (s *wordSource) next() string {
	return vocabulary[s.rng.IntN(len(vocabulary))]
}

// completionPlan is how many tokens a request generates and why it stops.
type completionPlan struct {
	tokens       int
	finishReason string
}

// planCompletion decides the completion length: max_tokens when the request
// gives one (finish "length"), else defaultCompletionTokens (finish "stop");
// shorter, finish "stop", when the engine ends answers after eosAfter tokens
// (0: never) and the request did not set ignore_eos; and never more than
// the context window leaves (finish "length"). The caller has already
// checked that the prompt leaves room for one token.
func planCompletion(maxTokens *int, promptTokens, maxModelLen, eosAfter int, ignoreEOS bool) completionPlan {
	room := maxModelLen - promptTokens
	p := completionPlan{tokens: defaultCompletionTokens, finishReason: "stop"}
	if maxTokens != nil {
		p = completionPlan{tokens: *maxTokens, finishReason: "length"}
	}
	if eosAfter > 0 && !ignoreEOS && eosAfter < p.tokens {
		p = completionPlan{tokens: eosAfter, finishReason: "stop"}
	}
	if p.tokens > room {
		p = completionPlan{tokens: room, finishReason: "length"}
	}
	return p
}

// overshoot lengthens a plan the request's max_tokens cut short by
// overshootTokens (Config.OvershootTokens): an engine that does not honour
// the bound. The finish reason stays "length".
func overshoot(p completionPlan, maxTokens *int, overshootTokens int) completionPlan {
	if overshootTokens > 0 && maxTokens != nil && p.finishReason == "length" && p.tokens == *maxTokens {
		p.tokens += overshootTokens
	}
	return p
}
