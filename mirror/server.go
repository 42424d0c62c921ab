package mirror

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/llmgw/llmgw/pki"
)

// Options configure `llmgw mirror serve`.
type Options struct {
	Dir string
	// Base is the URL agents reach the bytes listener at
	// (http://models.internal:8081); holdings carry their URL under it.
	Base string
	// BytesAddr and ManageAddr are the two listeners (":8081", ":8082").
	BytesAddr, ManageAddr string
	// TLSCA, TLSCert and TLSKey put the management listener behind mutual
	// TLS: clients must present a certificate signed by TLSCA. All three or none.
	TLSCA, TLSCert, TLSKey string
	Fetcher                *Fetcher
	Logger                 *slog.Logger
}

// Server is a running mirror's two listeners.
type Server struct {
	opts     Options
	store    *Store
	manager  *Manager
	metrics  *Metrics
	tls      *tls.Config
	bytesLn  net.Listener
	manageLn net.Listener
}

// New checks the options and opens both listeners.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Fetcher == nil {
		opts.Fetcher = &Fetcher{}
	}
	if opts.Fetcher.Logger == nil {
		opts.Fetcher.Logger = opts.Logger
	}
	st, err := NewStore(opts.Dir)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, store: st, metrics: NewMetrics()}
	if opts.Fetcher.Metrics == nil {
		opts.Fetcher.Metrics = s.metrics
	}
	switch n := count(opts.TLSCA, opts.TLSCert, opts.TLSKey); n {
	case 3:
		s.tls, err = pki.ServerTLS(opts.TLSCert, opts.TLSKey, opts.TLSCA, true)
		if err != nil {
			return nil, fmt.Errorf("management listener TLS: %w", err)
		}
	case 0:
	default:
		return nil, errors.New("management listener TLS: give --tls-ca, --tls-cert and --tls-key together, or none")
	}
	if s.bytesLn, err = net.Listen("tcp", opts.BytesAddr); err != nil {
		return nil, fmt.Errorf("bytes listener: %w", err)
	}
	if s.manageLn, err = net.Listen("tcp", opts.ManageAddr); err != nil {
		s.bytesLn.Close()
		return nil, fmt.Errorf("management listener: %w", err)
	}
	return s, nil
}

func count(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// BytesAddr and ManageAddr are the listeners' addresses (useful with port 0).
func (s *Server) BytesAddr() string  { return s.bytesLn.Addr().String() }
func (s *Server) ManageAddr() string { return s.manageLn.Addr().String() }

// Run serves until ctx ends, then stops downloads and closes the listeners.
func (s *Server) Run(ctx context.Context) error {
	log := s.opts.Logger
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	s.manager = NewManager(ctx, s.store, s.opts.Fetcher, log)
	s.manager.base = strings.TrimRight(s.opts.Base, "/")
	bytesSrv := &http.Server{Handler: BytesHandler(s.store, log, s.metrics), ReadHeaderTimeout: 10 * time.Second}
	manage := http.NewServeMux()
	manage.Handle("/", ManageHandler(s.manager))
	manage.Handle("GET /metrics", s.metrics.Handler())
	manageSrv := &http.Server{Handler: manage, ReadHeaderTimeout: 10 * time.Second}
	manageLn := s.manageLn
	if s.tls != nil {
		manageLn = tls.NewListener(manageLn, s.tls)
	} else {
		log.Warn("the management listener has no TLS: anyone who can reach it can start downloads and delete models; give --tls-ca, --tls-cert and --tls-key",
			"addr", s.ManageAddr())
	}
	log.Info("mirror serving", "dir", s.opts.Dir, "base", s.opts.Base, "bytes_addr", s.BytesAddr(), "manage_addr", s.ManageAddr(), "manage_mtls", s.tls != nil)
	errs := make(chan error, 2)
	go func() { errs <- bytesSrv.Serve(s.bytesLn) }()
	go func() { errs <- manageSrv.Serve(manageLn) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = bytesSrv.Shutdown(shutdown)
	_ = manageSrv.Shutdown(shutdown)
	stop()
	s.manager.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
