package ctl

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/llmgw/llmgw/pki"
)

const certUsage = `usage: llmgw ctl cert <init-ca|issue-server|issue-node> ...
  cert init-ca --dir D [--force]
  cert issue-server NAME --host H [--host H2 ...] --dir D --out O [--validity 8760h]
  cert issue-node NODE --dir D --out O [--validity 8760h]
These work on files only; run them where the CA is kept.
`

// defaultValidity is how long issued certificates last unless told otherwise.
const defaultValidity = 8760 * time.Hour

func (a *app) cmdCert(args []string) int {
	return a.runGroup("cert", certUsage, args, map[string]func([]string) int{
		"init-ca":      a.cmdCertInitCA,
		"issue-server": a.cmdCertIssueServer,
		"issue-node":   a.cmdCertIssueNode,
	})
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func (a *app) cmdCertInitCA(args []string) int {
	fs := a.newFlagSet("cert init-ca", "cert init-ca --dir D [--force]")
	dir := fs.String("dir", "", "directory for ca.pem and ca-key.pem")
	force := fs.Bool("force", false, "replace an existing CA (every certificate it issued stops being trusted)")
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	if *dir == "" {
		return a.usageErrorf(fs, "no CA directory: pass --dir")
	}
	certPath, keyPath, err := pki.InitCA(*dir, pki.CAOptions{Force: *force})
	if errors.Is(err, pki.ErrCAExists) {
		return a.errorf("%v", strings.Replace(err.Error(), "use force", "use --force", 1))
	}
	if err != nil {
		return a.errorf("creating the CA in %s: %v", *dir, err)
	}
	return a.reportIssued(certPath, keyPath,
		"the CA certificate; copy it to every machine, it is not a secret",
		"the CA's private key: whoever holds it can mint any node's identity, keep it private and on this machine")
}

func (a *app) cmdCertIssueServer(args []string) int {
	fs, f := a.newIssueFlagSet("cert issue-server", "cert issue-server NAME --host H [--host H2 ...] --dir D --out O [--validity 8760h]")
	var hosts stringList
	fs.Var(&hosts, "host", "a DNS name or IP address clients dial (repeat for each; bare IPs too)")
	name, code, ok := a.parseIssue(fs, f, args, "the server name")
	if !ok {
		return code
	}
	if len(hosts) == 0 {
		return a.usageErrorf(fs, "no --host: name every address clients dial, IP addresses included")
	}
	certPath, keyPath, err := pki.IssueServer(f.dir, name, hosts, f.out, f.validity)
	if err != nil {
		return a.errorf("%v", err)
	}
	return a.reportIssued(certPath, keyPath,
		fmt.Sprintf("server certificate %s for %s", name, strings.Join(hosts, ", ")),
		"its private key; readable only by the server")
}

func (a *app) cmdCertIssueNode(args []string) int {
	fs, f := a.newIssueFlagSet("cert issue-node", "cert issue-node NODE --dir D --out O [--validity 8760h]")
	node, code, ok := a.parseIssue(fs, f, args, "the node id")
	if !ok {
		return code
	}
	certPath, keyPath, err := pki.IssueNode(f.dir, node, f.out, f.validity)
	if err != nil {
		return a.errorf("%v", err)
	}
	return a.reportIssued(certPath, keyPath,
		fmt.Sprintf("node certificate; its common name %s is the node's identity", node),
		"its private key; install it on the node only")
}

// issueFlags are the flags both issue commands take.
type issueFlags struct {
	dir      string
	out      string
	validity time.Duration
}

// newIssueFlagSet makes the flag set of an issue command with the flags both
// issue commands take registered on it.
func (a *app) newIssueFlagSet(name, synopsis string) (*flag.FlagSet, *issueFlags) {
	fs := a.newFlagSet(name, synopsis)
	f := &issueFlags{}
	fs.StringVar(&f.dir, "dir", "", "the CA directory (ca.pem, ca-key.pem)")
	fs.StringVar(&f.out, "out", "", "directory to write the certificate and key to")
	fs.DurationVar(&f.validity, "validity", defaultValidity, "how long the certificate is valid")
	return fs, f
}

// parseIssue parses an issue command's one positional argument (what names
// it in the usage error) and checks the shared flags in f.
func (a *app) parseIssue(fs *flag.FlagSet, f *issueFlags, args []string, what string) (string, int, bool) {
	pos, code, ok := a.parse(fs, args, 1, what)
	if !ok {
		return "", code, false
	}
	switch {
	case f.dir == "":
		return "", a.usageErrorf(fs, "no CA directory: pass --dir"), false
	case f.out == "":
		return "", a.usageErrorf(fs, "no output directory: pass --out"), false
	case f.validity <= 0:
		return "", a.usageErrorf(fs, "--validity must be positive, got %s", f.validity), false
	}
	return pos[0], exitOK, true
}

// reportIssued says what was written where, and until when it is valid.
func (a *app) reportIssued(certPath, keyPath, certWhat, keyWhat string) int {
	notAfter, err := certExpiry(certPath)
	if err != nil {
		return a.errorf("%v", err)
	}
	fmt.Fprintf(a.stdout, "wrote %s: %s\n", certPath, certWhat)
	fmt.Fprintf(a.stdout, "wrote %s: %s (mode 0600)\n", keyPath, keyWhat)
	fmt.Fprintf(a.stdout, "valid until %s\n", notAfter.UTC().Format("2006-01-02 15:04 MST"))
	return exitOK
}

// certExpiry reads the certificate in a PEM file and returns when it
// expires.
func certExpiry(path string) (time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading certificate %s: %w", path, err)
	}
	cert, err := pki.ParseCertificate(data)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading certificate %s: %w", path, err)
	}
	return cert.NotAfter, nil
}
