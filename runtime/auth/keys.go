// Package auth authenticates client API keys for the gateway. Keys are looked
// up by hash through a short-lived cache, so the store is not read on every
// request and a revoked key stops working within the cache's TTL.
package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// DefaultTTL is how long a lookup (hit or miss) is trusted.
const DefaultTTL = 5 * time.Second

// touchEvery limits how often a key's last-used time is written.
const touchEvery = time.Minute

// maxCached bounds the cache against floods of made-up keys.
const maxCached = 100_000

// Keys implements gateway.Auth over the store.
//
// Its cache is hand-written rather than golang-lru/v2/expirable, which is one
// LRU on the wall clock: a flood of made-up keys would evict the real ones,
// the TTL cannot follow an injected clock, and each cache starts a purge
// goroutine that never stops.
type Keys struct {
	store store.APIKeyStore
	ttl   time.Duration
	now   func() time.Time
	log   *slog.Logger

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	key       store.APIKey
	found     bool
	expires   time.Time
	lastTouch time.Time
}

// NewKeys returns an authenticator. ttl <= 0 takes DefaultTTL.
func NewKeys(st store.APIKeyStore, ttl time.Duration, logger *slog.Logger) *Keys {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Keys{store: st, ttl: ttl, now: time.Now, log: logger.With("component", "auth"), cache: map[string]cached{}}
}

// Authenticate implements gateway.Auth.
func (k *Keys) Authenticate(ctx context.Context, bearer string) (request.Principal, error) {
	if bearer == "" {
		return request.Principal{}, fmt.Errorf("%w: no API key", request.ErrUnauthenticated)
	}
	hash := spec.HashSecret(bearer)
	now := k.now()
	k.mu.Lock()
	c, ok := k.cache[hash]
	k.mu.Unlock()
	if !ok || now.After(c.expires) {
		key, err := k.store.LookupAPIKey(ctx, hash)
		switch {
		case errors.Is(err, store.ErrNotFound):
			c = cached{found: false}
		case err != nil:
			return request.Principal{}, fmt.Errorf("looking up API key: %w", err)
		default:
			c = cached{key: key, found: true, lastTouch: c.lastTouch}
		}
		c.expires = now.Add(k.ttl)
		k.mu.Lock()
		if len(k.cache) >= maxCached {
			k.evictLocked()
		}
		k.cache[hash] = c
		k.mu.Unlock()
	}
	if !c.found {
		return request.Principal{}, fmt.Errorf("%w: invalid API key", request.ErrUnauthenticated)
	}
	if c.key.Expired(now) {
		return request.Principal{}, fmt.Errorf("%w: API key expired", request.ErrUnauthenticated)
	}
	if now.Sub(c.lastTouch) > touchEvery {
		k.mu.Lock()
		c.lastTouch = now
		k.cache[hash] = c
		k.mu.Unlock()
		go func(id string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := k.store.TouchAPIKey(ctx, id, now); err != nil {
				k.log.Debug("recording key use", "key", id, "err", err)
			}
		}(c.key.ID)
	}
	return request.Principal{KeyID: c.key.ID, Project: c.key.Project, RPM: c.key.RPM, TPM: c.key.TPM}, nil
}

// evictLocked makes room in a full cache: misses go first, so a flood of
// made-up keys does not push out the real ones; only if real keys alone
// fill it is everything dropped. k.mu must be held.
func (k *Keys) evictLocked() {
	for h, c := range k.cache {
		if !c.found {
			delete(k.cache, h)
		}
	}
	if len(k.cache) >= maxCached {
		k.cache = map[string]cached{}
	}
}

// Anonymous admits every request as the default project, for installations
// that turned auth.enabled off (a closed network, a benchmark). Any key sent
// is ignored.
type Anonymous struct{}

// Authenticate implements gateway.Auth.
func (Anonymous) Authenticate(context.Context, string) (request.Principal, error) {
	return request.Principal{Project: store.DefaultProject}, nil
}
