// Package users administers the people who run an installation: accounts
// with an email and a bcrypt-hashed password, and whether each is an
// administrator. It is used on the control-plane host (`llmgw users`): a shell
// there is what makes someone an administrator. Passwords are never logged,
// echoed or stored in clear.
package users

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"

	"github.com/llmgw/llmgw/runtime/store"
)

// Password lengths: bcrypt reads at most 72 bytes, and a longer password
// would be silently cut, so it is refused instead.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 72
)

// ErrWrongPassword means the password does not match the user's.
var ErrWrongPassword = errors.New("wrong email or password")

// Store is what Admin needs of a store: its users, and revoking a user's
// login tokens when the user is demoted. Every store.Store is one.
type Store interface {
	store.UserStore
	RevokeUserAdminTokens(ctx context.Context, userID string) (int64, error)
}

// Admin administers users in one store.
type Admin struct {
	st    Store
	close func() error
	cost  int

	dummyOnce sync.Once
	dummyHash []byte
}

// Open opens the store the DSN names; Close closes it.
func Open(ctx context.Context, dsn string) (*Admin, error) {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	return &Admin{st: st, close: st.Close, cost: bcrypt.DefaultCost}, nil
}

// New administers users in an open store, which Close leaves open. cost is
// the bcrypt cost (0: bcrypt.DefaultCost; tests use bcrypt.MinCost).
func New(st Store, cost int) *Admin {
	if cost == 0 {
		cost = bcrypt.DefaultCost
	}
	return &Admin{st: st, close: func() error { return nil }, cost: cost}
}

// Close closes the store if Open opened it.
func (a *Admin) Close() error { return a.close() }

// CheckEmail returns the address in canonical form (trimmed, lowercase) or
// an error naming what is wrong with it.
func CheckEmail(email string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(email))
	if e == "" {
		return "", errors.New("email is required")
	}
	addr, err := mail.ParseAddress(e)
	if err != nil || addr.Address != e || addr.Name != "" {
		return "", fmt.Errorf("email %q is not a plain address like ada@example.com", email)
	}
	return e, nil
}

// CheckPassword says what is wrong with a password, without quoting it.
func CheckPassword(pw string) error {
	switch {
	case utf8.RuneCountInString(pw) < MinPasswordLen:
		return fmt.Errorf("password is too short: at least %d characters", MinPasswordLen)
	case len(pw) > MaxPasswordLen:
		return fmt.Errorf("password is too long: at most %d bytes (bcrypt ignores the rest)", MaxPasswordLen)
	case strings.TrimSpace(pw) != pw:
		return errors.New("password starts or ends with whitespace (a stray newline?)")
	}
	return nil
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "usr-" + hex.EncodeToString(b[:])
}

// Create stores a new user with a bcrypt hash of the password.
func (a *Admin) Create(ctx context.Context, email, password string, admin bool) (store.User, error) {
	e, err := CheckEmail(email)
	if err != nil {
		return store.User{}, err
	}
	if err := CheckPassword(password); err != nil {
		return store.User{}, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), a.cost)
	if err != nil {
		return store.User{}, fmt.Errorf("hashing the password of %s: %w", e, err)
	}
	u := store.User{ID: newID(), Email: e, PasswordHash: string(hash), Admin: admin}
	if err := a.st.CreateUser(ctx, u); err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
			return store.User{}, fmt.Errorf("user %s already exists", e)
		}
		return store.User{}, err
	}
	u, err = a.st.GetUser(ctx, u.ID)
	u.PasswordHash = ""
	return u, err
}

// List returns every user, oldest first, without password hashes.
func (a *Admin) List(ctx context.Context) ([]store.User, error) {
	list, err := a.st.ListUsers(ctx)
	for i := range list {
		list[i].PasswordHash = ""
	}
	return list, err
}

// Get finds a user by id or email, without the password hash.
func (a *Admin) Get(ctx context.Context, idOrEmail string) (store.User, error) {
	u, err := a.find(ctx, idOrEmail)
	u.PasswordHash = ""
	return u, err
}

func (a *Admin) find(ctx context.Context, idOrEmail string) (store.User, error) {
	key := strings.TrimSpace(idOrEmail)
	if strings.Contains(key, "@") {
		key = strings.ToLower(key)
	}
	u, err := a.st.GetUser(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return store.User{}, fmt.Errorf("no user with id or email %q: %w", idOrEmail, store.ErrNotFound)
	}
	return u, err
}

// SetAdmin promotes (admin true) or demotes the user with this id or email
// and returns it. Demoting also revokes every admin token the user got by
// logging in, so promoting them again does not bring those back. (The store
// refuses a non-administrator's tokens anyway; revoking makes it final.)
func (a *Admin) SetAdmin(ctx context.Context, idOrEmail string, admin bool) (store.User, error) {
	u, err := a.find(ctx, idOrEmail)
	if err != nil {
		return store.User{}, err
	}
	if err := a.st.SetUserAdmin(ctx, u.ID, admin); err != nil {
		return store.User{}, err
	}
	if !admin {
		if _, err := a.st.RevokeUserAdminTokens(ctx, u.ID); err != nil {
			return store.User{}, fmt.Errorf("%s is demoted, but its login tokens are not revoked (run demote again): %w", u.Email, err)
		}
	}
	u.Admin, u.PasswordHash = admin, ""
	return u, nil
}

// Authenticate returns the user whose email and password these are, or an
// error wrapping ErrWrongPassword that does not say which was wrong.
func (a *Admin) Authenticate(ctx context.Context, email, password string) (store.User, error) {
	u, err := a.find(ctx, email)
	if errors.Is(err, store.ErrNotFound) {
		// Spend the time a wrong password costs, so that how long the
		// answer takes does not tell whether the email is a user's.
		_ = bcrypt.CompareHashAndPassword(a.dummy(), []byte(password))
		return store.User{}, ErrWrongPassword
	}
	if err != nil {
		return store.User{}, err
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) != nil {
		return store.User{}, ErrWrongPassword
	}
	u.PasswordHash = ""
	return u, nil
}

// dummy returns a hash of a random password at the Admin's cost, computed
// once.
func (a *Admin) dummy() []byte {
	a.dummyOnce.Do(func() {
		pw := make([]byte, 16)
		_, _ = rand.Read(pw)
		a.dummyHash, _ = bcrypt.GenerateFromPassword(pw, a.cost)
	})
	return a.dummyHash
}
