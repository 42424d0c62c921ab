// Package pgtest gives tests a real PostgreSQL. A test binary starts one
// server on first use (initdb in a temporary directory, listening only on a
// unix socket in it) and every test gets a database of its own, dropped when
// the test ends:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		dsn := pgtest.NewDatabase(t) // postgres://...
//	}
//
// The binaries are those in $LLMGW_TEST_PG_BIN, else the newest
// /usr/lib/postgresql/*/bin. With $LLMGW_TEST_POSTGRES_URL set, databases
// are created on that server instead and none is started. When no
// PostgreSQL is found the test is skipped, except under CI=true, where it
// fails: CI must run these tests.
//
// PostgreSQL refuses to run as root; as root the server runs as the
// postgres user. It gets SIGQUIT if the test binary dies, so a killed test
// run leaves no server behind.
package pgtest

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Environment variables read by the package.
const (
	// EnvBin names a directory holding initdb and postgres.
	EnvBin = "LLMGW_TEST_PG_BIN"
	// EnvURL is the postgres:// URL of an existing server to create test
	// databases on; its user must be allowed to CREATE DATABASE.
	EnvURL = "LLMGW_TEST_POSTGRES_URL"
)

const (
	// installRoot is where Debian and Ubuntu install PostgreSQL versions.
	installRoot = "/usr/lib/postgresql"
	// startTimeout bounds initdb and the server becoming ready, on a
	// loaded machine.
	startTimeout = 2 * time.Minute
	// stopTimeout bounds a fast shutdown before the server is killed.
	stopTimeout = 30 * time.Second
	// pollInterval is how often readiness is checked.
	pollInterval = 50 * time.Millisecond
	// adminTimeout bounds CREATE and DROP DATABASE.
	adminTimeout = time.Minute
	// serverUser is the role initdb creates and tests connect as.
	serverUser = "postgres"
)

// errNoPostgres means no PostgreSQL installation was found.
var errNoPostgres = errors.New("no PostgreSQL found")

// shared is the test binary's server. A test binary is one process and its
// tests share one server, so this is process state by nature; Main stops it.
var shared struct {
	mu   sync.Mutex
	main bool
	srv  *server
	err  error // sticky: a failed start is not retried by every test
	seq  int
}

// Main runs the test binary's tests and then stops the server if one was
// started. Call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		if err := shared.srv.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.srv = nil
	}
	return code
}

// NewDatabase creates an empty database for this test and returns its
// postgres:// URL. The database is dropped when the test ends (after the
// test's later cleanups, such as closing a store opened on it).
func NewDatabase(t testing.TB) string {
	t.Helper()
	srv, seq, err := sharedServer()
	switch {
	case errors.Is(err, errNoPostgres):
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("pgtest: %v; CI must run the PostgreSQL tests: install PostgreSQL (apt-get install postgresql), or set %s or %s", err, EnvBin, EnvURL)
		}
		t.Skipf("pgtest: %v; skipping (install PostgreSQL with apt-get install postgresql, or set %s or %s)", err, EnvBin, EnvURL)
	case err != nil:
		t.Fatalf("pgtest: %v", err)
	}
	name := databaseName(os.Getpid(), seq, t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if _, err := srv.admin.ExecContext(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if _, err := srv.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return srv.databaseURL(name)
}

// sharedServer returns the running server, starting it on first use, and
// a sequence number for the caller's database name.
func sharedServer() (*server, int, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		return nil, 0, errors.New("pgtest.Main is not running this test binary: add func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) } so the server is stopped after the tests")
	}
	shared.seq++
	if shared.srv != nil || shared.err != nil {
		return shared.srv, shared.seq, shared.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if raw := os.Getenv(EnvURL); raw != "" {
		shared.srv, shared.err = external(ctx, raw)
	} else {
		var bin string
		bin, shared.err = findBin(os.Getenv(EnvBin), installRoot)
		if shared.err == nil {
			shared.srv, shared.err = start(ctx, bin)
		}
	}
	return shared.srv, shared.seq, shared.err
}

// findBin returns the directory holding initdb and postgres: env when set
// (and then it must hold them), else the newest version under root.
func findBin(env, root string) (string, error) {
	has := func(dir string) error {
		for _, name := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
		return nil
	}
	if env != "" {
		if err := has(env); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBin, env, err)
		}
		return env, nil
	}
	matches, err := filepath.Glob(filepath.Join(root, "*", "bin", "initdb"))
	if err != nil {
		return "", fmt.Errorf("looking for PostgreSQL under %s: %w", root, err)
	}
	var dirs []string
	for _, m := range matches {
		dir := filepath.Dir(m)
		if has(dir) == nil {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) == 0 {
		return "", fmt.Errorf("%w: no %s/*/bin/initdb and %s is not set", errNoPostgres, root, EnvBin)
	}
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	return dirs[len(dirs)-1], nil
}

// compareVersions orders dotted version numbers numerically ("9.6" < "15");
// a part that is not a number sorts first.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		na, nb := -1, -1
		if i < len(pa) {
			if n, err := strconv.Atoi(pa[i]); err == nil {
				na = n
			}
		}
		if i < len(pb) {
			if n, err := strconv.Atoi(pb[i]); err == nil {
				nb = n
			}
		}
		if c := cmp.Compare(na, nb); c != 0 {
			return c
		}
	}
	return 0
}

// databaseName is a valid, unique PostgreSQL database name (at most 63
// bytes) recognisable as the test's.
func databaseName(pid, seq int, testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := fmt.Sprintf("llmgw_t%d_%d_%s", pid, seq, b.String())
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

// server is a PostgreSQL tests create databases on.
type server struct {
	base  *url.URL // the server's URL; its path is replaced per database
	admin *sql.DB  // connected to the maintenance database

	// Set for a server this package started.
	cmd    *exec.Cmd
	dir    string
	log    string
	exited chan struct{}
}

func (s *server) databaseURL(name string) string {
	u := *s.base
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// external uses the server at raw.
func external(ctx context.Context, raw string) (*server, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("%s is not a postgres:// URL", EnvURL)
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse as a PostgreSQL URL", EnvURL)
	}
	s := &server{base: u, admin: stdlib.OpenDB(*cfg)}
	if err := s.admin.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("connecting to the server in %s: %w", EnvURL, err), s.admin.Close())
	}
	return s, nil
}

// start runs initdb and postgres from bin in a new temporary directory.
func start(ctx context.Context, bin string) (_ *server, err error) {
	// Under os.TempDir, not t.TempDir: the postgres user must be able to
	// reach it, and a directory under /root is not traversable by it.
	dir, err := os.MkdirTemp("", "llmgw-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("creating the PostgreSQL directory: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, removeDir(dir))
		}
	}()
	attr, err := procAttr(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"--pgdata", data, "--username", serverUser, "--auth", "trust",
		"--encoding", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = attr()
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("running %s: %w\n%s", initdb.Path, err, out)
	}

	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the PostgreSQL log: %w", err)
	}
	defer logFile.Close()
	// Only a unix socket in dir: no TCP port to race other tests for.
	// Durability settings are off: a test database never outlives a crash.
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", data,
		"-k", dir,
		"-c", "listen_addresses=",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB",
		"-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = attr()
	// The server dies with the test binary, however it ends.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	s := &server{
		base:   &url.URL{Scheme: "postgres", User: url.User(serverUser), Path: "/postgres", RawQuery: url.Values{"host": {dir}}.Encode()},
		cmd:    cmd,
		dir:    dir,
		log:    logPath,
		exited: make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	defer func() {
		if err != nil {
			err = errors.Join(err, s.kill())
		}
	}()
	cfg, err := pgx.ParseConfig(s.databaseURL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("parsing the test server's URL: %w", err)
	}
	s.admin = stdlib.OpenDB(*cfg)
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// procAttr returns what the server's processes run with: as root, the
// postgres user (PostgreSQL refuses root), owning dir.
func procAttr(dir string) (func() *syscall.SysProcAttr, error) {
	if os.Geteuid() != 0 {
		return func() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as the %s user: %w", serverUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of %s: %w", serverUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of %s: %w", serverUser, err)
	}
	if err := os.Chown(dir, int(uid), int(gid)); err != nil {
		return nil, fmt.Errorf("handing %s to %s: %w", dir, serverUser, err)
	}
	return func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}, nil
}

// waitReady polls a connection until the server answers, it exits, or ctx
// ends.
func (s *server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = s.admin.PingContext(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("PostgreSQL exited while starting (%v)\n%s", s.cmd.ProcessState, s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("PostgreSQL did not accept connections in time: %w\n%s", last, s.logTail())
		case <-tick.C:
		}
	}
}

// logTail returns the end of the server's log, for failure messages.
func (s *server) logTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", s.log, err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// stop shuts the server down (fast shutdown, then kill) and removes its
// directory.
func (s *server) stop() error {
	errs := []error{s.admin.Close()}
	if s.cmd == nil {
		return errors.Join(errs...)
	}
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, fmt.Errorf("stopping PostgreSQL: %w", err))
	}
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		errs = append(errs, fmt.Errorf("PostgreSQL did not stop within %s; killed it", stopTimeout))
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	errs = append(errs, removeDir(s.dir))
	return errors.Join(errs...)
}

// kill ends a server that failed to start.
func (s *server) kill() error {
	var errs []error
	if s.admin != nil {
		errs = append(errs, s.admin.Close())
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		errs = append(errs, fmt.Errorf("killing PostgreSQL: %w", err))
	}
	<-s.exited
	return errors.Join(errs...)
}

func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
