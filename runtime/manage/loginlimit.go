package manage

import (
	"sync"
	"time"
)

// loginLimiter slows password guessing against Login. Every attempt counts
// against its keys (its email, and its remote address) before the password is
// checked, so parallel guesses cannot slip past the count; an attempt that
// turns out right gives its count back. Once a key has used its free
// attempts, each further attempt locks it for twice as long as the last,
// up to maxLock. A key unused for forget is forgotten.
//
// It lives in memory: a restart forgets it, which costs an attacker a
// restart per few guesses.
type loginLimiter struct {
	base    time.Duration
	maxLock time.Duration
	forget  time.Duration
	maxKeys int

	mu   sync.Mutex
	keys map[string]*loginCount
}

// loginKey is what an attempt counts against, and how many attempts it
// may make before it is locked.
type loginKey struct {
	name string
	free int
}

type loginCount struct {
	free     int
	attempts int
	last     time.Time
	until    time.Time // locked until
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{
		base: time.Second, maxLock: 5 * time.Minute, forget: 15 * time.Minute, maxKeys: 100000,
		keys: map[string]*loginCount{},
	}
}

// admit refuses an attempt while any of its keys is locked, returning how
// long until the last of them unlocks; otherwise it counts the attempt
// against every key (locking those that have used their free attempts) and
// returns 0. Checking and counting are one step, so parallel attempts
// cannot all pass a check before any is counted.
func (l *loginLimiter) admit(now time.Time, keys ...loginKey) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	for _, k := range keys {
		if c := l.keys[k.name]; c != nil && now.Before(c.until) {
			wait = max(wait, c.until.Sub(now))
		}
	}
	if wait > 0 {
		return wait
	}
	for _, k := range keys {
		l.count(k, now)
	}
	return 0
}

// count counts one attempt against the key. Called with mu held.
func (l *loginLimiter) count(key loginKey, now time.Time) {
	c := l.keys[key.name]
	if c != nil && now.Sub(c.last) > l.forget {
		c = nil
	}
	if c == nil {
		l.makeRoom(now)
		c = &loginCount{free: key.free}
		l.keys[key.name] = c
	}
	c.attempts++
	c.last = now
	if over := c.attempts - c.free; over >= 0 {
		lock := l.maxLock
		if over < 30 && l.base<<over < l.maxLock {
			lock = l.base << over
		}
		c.until = now.Add(lock)
	}
}

// succeeded gives back the attempt counted for the key; reset forgets the
// key altogether (its owner proved who they are).
func (l *loginLimiter) succeeded(key string, reset bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.keys[key]
	if c == nil {
		return
	}
	if c.attempts--; reset || c.attempts <= 0 {
		delete(l.keys, key)
		return
	}
	if c.attempts < c.free {
		c.until = time.Time{}
	}
}

// makeRoom forgets idle keys when the map is full, and an arbitrary one if
// none is idle, so that guesses from many addresses cannot grow it without
// bound. Called with mu held.
func (l *loginLimiter) makeRoom(now time.Time) {
	if len(l.keys) < l.maxKeys {
		return
	}
	for k, c := range l.keys {
		if now.Sub(c.last) > l.forget && !now.Before(c.until) {
			delete(l.keys, k)
		}
	}
	for k := range l.keys {
		if len(l.keys) < l.maxKeys {
			break
		}
		delete(l.keys, k)
	}
}
