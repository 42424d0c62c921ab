package ctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// skipOutsideCI skips t, except under CI=true, where what the test needs
// must be there: it fails t instead.
func skipOutsideCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("CI: "+format, args...)
	}
	t.Skipf(format, args...)
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (controller, terminal *os.File) {
	t.Helper()
	controller, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		skipOutsideCI(t, "no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { controller.Close() })
	if err := unix.IoctlSetPointerInt(int(controller.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(controller.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("numbering the pty: %v", err)
	}
	terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pty: %v", err)
	}
	t.Cleanup(func() { terminal.Close() })
	return controller, terminal
}

// A password typed at a terminal is read without being echoed, and echo is
// on again afterwards.
func TestLoginPasswordFromTerminal(t *testing.T) {
	controller, terminal := openPTY(t)
	if !isTerminal(terminal) {
		t.Fatal("isTerminal(pty) = false")
	}
	if f, err := os.CreateTemp(t.TempDir(), "x"); err == nil {
		if isTerminal(f) {
			t.Error("isTerminal(regular file) = true")
		}
		f.Close()
	}
	env, _ := startLoginManage(t)
	var out, errOut bytes.Buffer
	a := &app{stdin: terminal, stdout: &out, stderr: &errOut, env: func(k string) string { return env[k] }, now: time.Now}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- a.run(ctx, []string{"login", "--email", loginAdmin}) }()
	// Type the password once login has turned echo off, as a person would
	// after the prompt.
	for deadline := time.Now().Add(10 * time.Second); ; {
		tio, err := unix.IoctlGetTermios(int(terminal.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("login never turned the terminal's echo off")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := controller.WriteString(loginAdminPW + "\n"); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("login: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "password for "+loginAdmin+": ") || !strings.Contains(out.String(), "export "+EnvToken+"=") {
		t.Errorf("login at a terminal: stdout %q, stderr %q", out.String(), errOut.String())
	}
	// What the terminal showed: the newline only, never the password.
	if err := controller.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		skipOutsideCI(t, "cannot bound reads of the pty: %v", err)
	}
	shown := make([]byte, 256)
	n, _ := controller.Read(shown)
	if strings.Contains(string(shown[:n]), "horse") {
		t.Errorf("the terminal echoed the password: %q", shown[:n])
	}
	tio, err := unix.IoctlGetTermios(int(terminal.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO == 0 {
		t.Error("echo is still off after reading the password")
	}
}

// Ctrl-D at an empty password prompt is an empty password (login then
// refuses it by name) and the read returns. golang.org/x/term's
// ReadPassword loops forever on that zero-byte read, which is why ctl keeps
// its own echo control.
func TestReadNoEchoEndOfInput(t *testing.T) {
	controller, terminal := openPTY(t)
	got := make(chan error, 1)
	go func() {
		pw, err := readNoEcho(terminal)
		if err == nil && pw != "" {
			err = fmt.Errorf("password %q", pw)
		}
		got <- err
	}()
	// ^D only ends input once the terminal is in the mode readNoEcho set:
	// keep sending it until the read returns.
	deadline := time.After(10 * time.Second)
	for {
		if _, err := controller.Write([]byte{4}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("readNoEcho after ^D: %v, want an empty password", err)
			}
			return
		case <-deadline:
			t.Fatal("readNoEcho did not return after ^D")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
