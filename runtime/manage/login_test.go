package manage

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/users"
	"github.com/llmgw/llmgw/spec"
)

const (
	adminEmail = "ada@example.com"
	adminPass  = "correct horse battery"
	devEmail   = "bob@example.com"
	devPass    = "another long password"
	loginTTL   = 2 * time.Hour
)

// clock is a settable clock shared by the service and its store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// syncBuffer is a log sink safe for the service's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

type loginFixture struct {
	s     *Service
	st    store.Store
	users *users.Admin
	clock *clock
	log   *syncBuffer
	admin store.User
}

// newLoginService is a service whose users are an administrator (ada) and
// a user who is not one (bob), on a store sharing the service's clock.
func newLoginService(t *testing.T) *loginFixture {
	t.Helper()
	c := &clock{t: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "llmgw.db"), store.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg, err := models.New(nil, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	ua := users.New(st, bcrypt.MinCost)
	admin, err := ua.Create(context.Background(), adminEmail, adminPass, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ua.Create(context.Background(), devEmail, devPass, false); err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	s := New(Options{Version: "test", Fleet: fleet.New(), Catalog: reg, Tokens: st, Store: st, Users: ua, LoginTTL: loginTTL,
		Now: c.Now, Logger: slog.New(slog.NewTextHandler(buf, nil))})
	return &loginFixture{s: s, st: st, users: ua, clock: c, log: buf, admin: admin}
}

// from is a context whose call came from this address.
func from(addr string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(addr), Port: 51234}})
}

func (f *loginFixture) login(addr, email, password string) (*managev1.LoginResponse, error) {
	return f.call(from(addr), "", managev1.ManageService_Login_FullMethodName, &managev1.LoginRequest{Email: email, Password: password})
}

// call runs one call through the AuthInterceptor, as the gRPC server does,
// with token as its bearer token ("" for none).
func (f *loginFixture) call(ctx context.Context, token, method string, req any) (*managev1.LoginResponse, error) {
	if token != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+token))
	}
	handler := func(ctx context.Context, req any) (any, error) {
		switch method {
		case managev1.ManageService_Login_FullMethodName:
			return f.s.Login(ctx, req.(*managev1.LoginRequest))
		case managev1.ManageService_Logout_FullMethodName:
			return f.s.Logout(ctx, req.(*managev1.LogoutRequest))
		}
		return f.s.GetStatus(ctx, &managev1.GetStatusRequest{})
	}
	out, err := f.s.AuthInterceptor()(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, handler)
	resp, _ := out.(*managev1.LoginResponse)
	return resp, err
}

// works reports whether a management call with the token is let through.
func (f *loginFixture) works(token string) error {
	_, err := f.call(context.Background(), token, managev1.ManageService_GetStatus_FullMethodName, nil)
	return err
}

func TestLogin(t *testing.T) {
	tests := []struct {
		name, email, password string
		code                  codes.Code
		want                  []string
	}{
		{"administrator", adminEmail, adminPass, codes.OK, nil},
		{"administrator, email in another case", " ADA@Example.com ", adminPass, codes.OK, nil},
		{"not an administrator", devEmail, devPass, codes.PermissionDenied,
			[]string{devEmail + " is not an administrator", "llmgw users promote " + devEmail, "on the control-plane host"}},
		{"wrong password", adminEmail, adminPass + "!", codes.Unauthenticated, []string{"wrong email or password"}},
		{"unknown email", "eve@example.com", adminPass, codes.Unauthenticated, []string{"wrong email or password"}},
		{"password too long to be anyone's", adminEmail, strings.Repeat("x", 2000), codes.Unauthenticated, []string{"wrong email or password"}},
		{"no password", adminEmail, "", codes.InvalidArgument, []string{"needs an email and a password"}},
		{"no email", "", adminPass, codes.InvalidArgument, []string{"needs an email and a password"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newLoginService(t)
			resp, err := f.login("192.0.2.7", tt.email, tt.password)
			if tt.code != codes.OK {
				wantCode(t, err, tt.code, tt.want...)
				if resp != nil {
					t.Errorf("a refused login returned %v", resp)
				}
				list, _ := f.st.ListAdminTokens(context.Background())
				if len(list) != 0 {
					t.Errorf("a refused login stored tokens %+v", list)
				}
				return
			}
			if err != nil {
				t.Fatalf("Login: %v", err)
			}
			if !spec.IsAdminToken(resp.GetToken()) || resp.GetUserId() != f.admin.ID || resp.GetEmail() != adminEmail {
				t.Fatalf("Login = %v", resp)
			}
			if want := f.clock.Now().Add(loginTTL).UnixMilli(); resp.GetExpiresUnixMs() != want {
				t.Errorf("expires %d, want now + login TTL = %d", resp.GetExpiresUnixMs(), want)
			}
			if err := f.works(resp.GetToken()); err != nil {
				t.Fatalf("a management call with the login's token: %v", err)
			}
			stored, err := f.st.LookupAdminToken(context.Background(), spec.HashSecret(resp.GetToken()))
			if err != nil || stored.ID != resp.GetTokenId() || stored.UserID != f.admin.ID || stored.ExpiresAt == nil {
				t.Fatalf("stored token = %+v, %v", stored, err)
			}
			if stored.Hash == resp.GetToken() {
				t.Error("the token is stored in clear")
			}
		})
	}
}

func TestLoginWrongEmailAndWrongPasswordLookTheSame(t *testing.T) {
	f := newLoginService(t)
	_, errEmail := f.login("192.0.2.7", "eve@example.com", adminPass)
	_, errPass := f.login("192.0.2.7", adminEmail, "not the password at all")
	if errEmail == nil || errPass == nil || errEmail.Error() != errPass.Error() {
		t.Fatalf("wrong email: %v; wrong password: %v; want the same error", errEmail, errPass)
	}
}

func TestLoginTokenExpires(t *testing.T) {
	f := newLoginService(t)
	resp, err := f.login("192.0.2.7", adminEmail, adminPass)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(loginTTL - time.Second)
	if err := f.works(resp.GetToken()); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	f.clock.Add(time.Second)
	err = f.works(resp.GetToken())
	wantCode(t, err, codes.Unauthenticated, "expired", "llmgw ctl login")
}

func TestDemoteRevokesLogin(t *testing.T) {
	f := newLoginService(t)
	ctx := context.Background()
	resp, err := f.login("192.0.2.7", adminEmail, adminPass)
	if err != nil {
		t.Fatal(err)
	}
	host, err := keys.New(f.st).CreateAdminToken(ctx, "terraform")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.users.SetAdmin(ctx, adminEmail, false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.works(resp.GetToken()), codes.Unauthenticated, "not recognised")
	if _, err := f.users.SetAdmin(ctx, adminEmail, true); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.works(resp.GetToken()), codes.Unauthenticated, "not recognised")
	if err := f.works(host.Secret); err != nil {
		t.Errorf("a host token stopped working when a user was demoted: %v", err)
	}
	// Promoted again, the user logs in anew.
	again, err := f.login("192.0.2.7", adminEmail, adminPass)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.works(again.GetToken()); err != nil {
		t.Errorf("a new login after promotion: %v", err)
	}
}

func TestLogout(t *testing.T) {
	f := newLoginService(t)
	ctx := context.Background()
	resp, err := f.login("192.0.2.7", adminEmail, adminPass)
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.login("192.0.2.7", adminEmail, adminPass)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.call(ctx, resp.GetToken(), managev1.ManageService_Logout_FullMethodName, &managev1.LogoutRequest{}); err != nil {
		t.Fatalf("Logout: %v", err)
	}
	wantCode(t, f.works(resp.GetToken()), codes.Unauthenticated)
	if err := f.works(other.GetToken()); err != nil {
		t.Errorf("logging out one session ended another: %v", err)
	}
	_, err = f.call(ctx, resp.GetToken(), managev1.ManageService_Logout_FullMethodName, &managev1.LogoutRequest{})
	wantCode(t, err, codes.Unauthenticated)

	host, err := keys.New(f.st).CreateAdminToken(ctx, "terraform")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.call(ctx, host.Secret, managev1.ManageService_Logout_FullMethodName, &managev1.LogoutRequest{})
	wantCode(t, err, codes.FailedPrecondition, "did not come from llmgw ctl login", "control-plane host")
	if err := f.works(host.Secret); err != nil {
		t.Errorf("logout with a host token revoked it: %v", err)
	}
}

// Login, and only Login, is let through without a token.
func TestInterceptorExemptsOnlyLogin(t *testing.T) {
	f := newLoginService(t)
	ctx := context.Background()
	for _, m := range []string{
		managev1.ManageService_Logout_FullMethodName,
		managev1.ManageService_GetStatus_FullMethodName,
		managev1.ManageService_CreateApiKey_FullMethodName,
		"/llmgw.manage.v1.ManageService/login",
		managev1.ManageService_Login_FullMethodName + "x",
	} {
		called := false
		_, err := f.s.AuthInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: m}, func(context.Context, any) (any, error) {
			called = true
			return nil, nil
		})
		if called || err == nil {
			t.Errorf("%s without a token: handler called %v, err %v", m, called, err)
		}
	}
	if _, err := f.call(ctx, "", managev1.ManageService_Login_FullMethodName, &managev1.LoginRequest{Email: adminEmail, Password: adminPass}); err != nil {
		t.Errorf("Login without a token: %v", err)
	}
}

func TestLoginLimited(t *testing.T) {
	t.Run("per email", func(t *testing.T) {
		f := newLoginService(t)
		for i := range loginFreePerEmail {
			_, err := f.login("192.0.2.1", adminEmail, "guess number "+string(rune('a'+i)))
			wantCode(t, err, codes.Unauthenticated)
		}
		// Locked now, even with the right password and from another address.
		_, err := f.login("192.0.2.2", adminEmail, adminPass)
		wantCode(t, err, codes.ResourceExhausted, "too many failed logins", "try again in")
		// Another email from the same address is not locked.
		if _, err := f.login("192.0.2.1", devEmail, devPass); code(err) != codes.PermissionDenied {
			t.Fatalf("another user from the same address: %v, want PermissionDenied", err)
		}
		f.clock.Add(loginLockBase())
		if _, err := f.login("192.0.2.2", adminEmail, adminPass); err != nil {
			t.Fatalf("after the lock: %v", err)
		}
		// Success forgets the failures: one more mistake does not lock.
		_, err = f.login("192.0.2.2", adminEmail, "one more mistake")
		wantCode(t, err, codes.Unauthenticated)
		if _, err := f.login("192.0.2.2", adminEmail, adminPass); err != nil {
			t.Fatalf("after a success and one mistake: %v", err)
		}
	})
	t.Run("per address", func(t *testing.T) {
		f := newLoginService(t)
		for i := range loginFreePerAddress {
			_, err := f.login("198.51.100.9", "user"+string(rune('a'+i))+"@example.com", "some password guess")
			wantCode(t, err, codes.Unauthenticated)
		}
		_, err := f.login("198.51.100.9", adminEmail, adminPass)
		wantCode(t, err, codes.ResourceExhausted)
		if _, err := f.login("198.51.100.10", adminEmail, adminPass); err != nil {
			t.Fatalf("from another address: %v", err)
		}
	})
	t.Run("parallel guesses", func(t *testing.T) {
		f := newLoginService(t)
		const n = 30
		var wg sync.WaitGroup
		var mu sync.Mutex
		checked := 0
		for range n {
			wg.Go(func() {
				_, err := f.login("203.0.113.5", adminEmail, "parallel guess")
				if code(err) == codes.Unauthenticated {
					mu.Lock()
					checked++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if checked == 0 || checked > loginFreePerEmail {
			t.Errorf("%d parallel guesses had their password checked, want 1 to %d", checked, loginFreePerEmail)
		}
	})
}

func loginLockBase() time.Duration { return newLoginLimiter().base }

func TestLoginLogs(t *testing.T) {
	f := newLoginService(t)
	if _, err := f.login("192.0.2.44", adminEmail, "wrong but secret-ish"); err == nil {
		t.Fatal("wrong password accepted")
	}
	// Someone types their password into the email field.
	if _, err := f.login("192.0.2.44", adminPass, adminPass); err == nil {
		t.Fatal("password as email accepted")
	}
	resp, err := f.login("192.0.2.44", adminEmail, adminPass)
	if err != nil {
		t.Fatal(err)
	}
	logs := f.log.String()
	for _, want := range []string{"login refused", "email=" + adminEmail, "remote=192.0.2.44", "(not an email address)", "administrator logged in"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log does not say %q:\n%s", want, logs)
		}
	}
	for _, secretText := range []string{"wrong but secret-ish", adminPass, "horse", resp.GetToken()} {
		if strings.Contains(logs, secretText) {
			t.Errorf("log holds %q:\n%s", secretText, logs)
		}
	}
}

func TestLoginOff(t *testing.T) {
	s, _ := newService(t)
	_, err := s.Login(context.Background(), &managev1.LoginRequest{Email: adminEmail, Password: adminPass})
	wantCode(t, err, codes.Unimplemented, "llmgw keys admin-token")
}

func TestLoginLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := loginKey{"email:a", 3}
	tests := []struct {
		name  string
		steps func(l *loginLimiter) time.Duration // returns the final admit's wait
		want  time.Duration
	}{
		{"free attempts pass", func(l *loginLimiter) time.Duration {
			l.admit(t0, k)
			l.admit(t0, k)
			return l.admit(t0, k)
		}, 0},
		{"then locked for the base", func(l *loginLimiter) time.Duration {
			for range 3 {
				l.admit(t0, k)
			}
			return l.admit(t0, k)
		}, time.Second},
		{"each further attempt doubles the lock", func(l *loginLimiter) time.Duration {
			for range 3 {
				l.admit(t0, k)
			}
			l.admit(t0.Add(time.Second), k) // the 4th: locked 2s
			return l.admit(t0.Add(time.Second), k)
		}, 2 * time.Second},
		{"lock capped", func(l *loginLimiter) time.Duration {
			at := t0
			for range 20 {
				l.admit(at, k)
				at = at.Add(l.admit(at, k))
			}
			l.admit(at, k)
			return l.admit(at, k)
		}, 5 * time.Minute},
		{"success gives the attempt back", func(l *loginLimiter) time.Duration {
			l.admit(t0, k)
			l.admit(t0, k)
			l.admit(t0, k) // locks
			l.succeeded(k.name, false)
			return l.admit(t0, k)
		}, 0},
		{"forgotten after a quiet while", func(l *loginLimiter) time.Duration {
			for range 3 {
				l.admit(t0, k)
			}
			l.admit(t0.Add(20*time.Minute), k)
			return l.admit(t0.Add(20*time.Minute), k)
		}, 0},
		{"a locked key refuses without counting the other", func(l *loginLimiter) time.Duration {
			other := loginKey{"addr:x", 2}
			for range 3 {
				l.admit(t0, k)
			}
			l.admit(t0, k, other)
			l.admit(t0, k, other)
			return l.admit(t0, other)
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.steps(newLoginLimiter()); got != tt.want {
				t.Errorf("wait = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLoginLimiterBounded(t *testing.T) {
	l := newLoginLimiter()
	l.maxKeys = 10
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100 {
		l.admit(t0, loginKey{"addr:" + string(rune('a'+i)), 5})
	}
	if n := len(l.keys); n > l.maxKeys {
		t.Errorf("limiter holds %d keys, want at most %d", n, l.maxKeys)
	}
}

// TestLoginHugeEmailBoundedMemory: a megabyte "email" is refused like any
// wrong login, and the limiter keeps a short key for it, not the megabyte.
func TestLoginHugeEmailBoundedMemory(t *testing.T) {
	f := newLoginService(t)
	huge := strings.Repeat("a", 1<<20) + "@example.com"
	if _, err := f.login("192.0.2.8", huge, adminPass); err == nil {
		t.Fatal("a huge email logged in")
	}
	f.s.logins.mu.Lock()
	defer f.s.logins.mu.Unlock()
	for k := range f.s.logins.keys {
		if len(k) > 200 {
			t.Errorf("the limiter keeps a %d-byte key", len(k))
		}
	}
}
