package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api/mirrorv1"
)

// Download states.
const (
	StateDownloading = mirrorv1.StateDownloading
	StateComplete    = mirrorv1.StateComplete
	StateFailed      = mirrorv1.StateFailed
)

// DownloadRequest is the body of POST /v1/downloads.
type DownloadRequest = mirrorv1.DownloadRequest

// DownloadStatus is one download as GET /v1/downloads lists it.
type DownloadStatus = mirrorv1.DownloadStatus

type download struct {
	req      DownloadRequest
	progress *Progress
	started  time.Time
	cancel   context.CancelFunc

	mu       sync.Mutex
	state    string
	lastErr  string
	finished time.Time
}

func (d *download) status() DownloadStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := DownloadStatus{
		Model: d.req.Model, Version: d.req.Version, Source: d.req.Source,
		State: d.state, Bytes: d.progress.Bytes(), LastError: d.lastErr, Started: d.started,
	}
	if t := d.progress.Total(); t >= 0 {
		st.Total = &t
	}
	end := time.Now()
	if !d.finished.IsZero() {
		f := d.finished
		st.Finished = &f
		end = f
	}
	if secs := end.Sub(d.started).Seconds(); secs > 0 {
		st.RateBytesPerSecond = float64(st.Bytes) / secs
	}
	return st
}

// Manager runs the downloads the management API starts, one at a time per
// model/version.
type Manager struct {
	store   *Store
	fetcher *Fetcher
	log     *slog.Logger
	ctx     context.Context
	base    string

	mu        sync.Mutex
	downloads map[string]*download
	wg        sync.WaitGroup
}

// NewManager returns a manager whose downloads stop when ctx ends.
func NewManager(ctx context.Context, s *Store, f *Fetcher, log *slog.Logger) *Manager {
	return &Manager{store: s, fetcher: f, log: log, ctx: ctx, downloads: map[string]*download{}}
}

// Wait waits for every download to return (after ctx ended, promptly).
func (m *Manager) Wait() { m.wg.Wait() }

// Start begins a download in the background.
func (m *Manager) Start(req DownloadRequest) (DownloadStatus, error) {
	if _, err := m.store.versionDir(req.Model, req.Version); err != nil {
		return DownloadStatus{}, err
	}
	if req.Source == "" {
		return DownloadStatus{}, errors.New("source is empty")
	}
	key := req.Model + "/" + req.Version
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.downloads[key]; ok && d.status().State == StateDownloading {
		return DownloadStatus{}, ErrBusy
	}
	ctx, cancel := context.WithCancel(m.ctx)
	d := &download{req: req, progress: &Progress{}, started: time.Now(), cancel: cancel, state: StateDownloading}

	m.downloads[key] = d
	m.wg.Go(func() {
		defer cancel()
		err := m.fetcher.Fetch(ctx, m.store, req.Model, req.Version, req.Source, d.progress)
		d.mu.Lock()
		d.finished = time.Now()
		if err != nil {
			d.state, d.lastErr = StateFailed, err.Error()
		} else {
			d.state = StateComplete
		}
		d.mu.Unlock()
		if err != nil {
			m.log.Error("download failed", "model", req.Model, "version", req.Version, "source", logSource(req.Source), "err", err)
		}
	})
	return d.status(), nil
}

// Downloads lists every download started since the mirror started.
func (m *Manager) Downloads() []DownloadStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]DownloadStatus, 0, len(m.downloads))
	for _, d := range m.downloads {
		out = append(out, d.status())
	}
	slices.SortFunc(out, func(a, b DownloadStatus) int {
		return strings.Compare(a.Model+"/"+a.Version, b.Model+"/"+b.Version)
	})
	return out
}

func (m *Manager) downloading(model, version string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.downloads[model+"/"+version]
	return ok && d.status().State == StateDownloading
}

// ManageHandler is the management API:
//
//	GET    /v1/holdings                     every version held: files, sizes, complete, downloading
//	DELETE /v1/holdings/{model}/{version}   delete a version (409 while it downloads)
//	POST   /v1/downloads                    start a download: {"model","version","source"} (202)
//	GET    /v1/downloads                    every download's progress
//	GET    /v1/downloads/{model}/{version}  one download's progress
func ManageHandler(m *Manager) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/holdings", func(w http.ResponseWriter, r *http.Request) {
		hs, err := m.store.Holdings()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		for i := range hs {
			hs[i].Downloading = m.downloading(hs[i].Model, hs[i].Version)
			if m.base != "" {
				hs[i].URL = m.base + "/" + hs[i].Model + "/" + hs[i].Version + "/"
			}
		}
		writeJSON(w, http.StatusOK, hs)
	})
	mux.HandleFunc("DELETE /v1/holdings/{model}/{version}", func(w http.ResponseWriter, r *http.Request) {
		model, version := r.PathValue("model"), r.PathValue("version")
		if m.downloading(model, version) {
			writeError(w, http.StatusConflict, ErrBusy)
			return
		}
		err := m.store.Delete(model, version)
		switch {
		case errors.Is(err, ErrBusy):
			writeError(w, http.StatusConflict, err)
		case errors.Is(err, fs.ErrNotExist):
			writeError(w, http.StatusNotFound, err)
		case err != nil:
			writeError(w, http.StatusBadRequest, err)
		default:
			m.log.Info("version deleted", "model", model, "version", version)
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /v1/downloads", func(w http.ResponseWriter, r *http.Request) {
		var req DownloadRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		st, err := m.Start(req)
		switch {
		case errors.Is(err, ErrBusy):
			writeError(w, http.StatusConflict, err)
		case err != nil:
			writeError(w, http.StatusBadRequest, err)
		default:
			writeJSON(w, http.StatusAccepted, st)
		}
	})
	mux.HandleFunc("GET /v1/downloads", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Downloads())
	})
	mux.HandleFunc("GET /v1/downloads/{model}/{version}", func(w http.ResponseWriter, r *http.Request) {
		for _, d := range m.Downloads() {
			if d.Model == r.PathValue("model") && d.Version == r.PathValue("version") {
				writeJSON(w, http.StatusOK, d)
				return
			}
		}
		writeError(w, http.StatusNotFound, errors.New("no download of this model/version since the mirror started"))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
