package mirror

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	dl "github.com/llmgw/llmgw/internal/download"
)

// SHA256Header carries the lowercase hex sha256 of the whole file on the
// bytes listener's answers.
const SHA256Header = "X-Llmgw-Sha256"

// BytesHandler serves the store read-only:
//
//	GET|HEAD /<model>/<version>/<path>  the file, with Range support and SHA256Header
//	GET|HEAD /<model>/<version>/        the version's Manifest (JSON), when complete
//
// Paths with "..", empty or hidden elements are refused (400), never resolved.
// metrics may be nil.
func BytesHandler(s *Store, log *slog.Logger, metrics *Metrics) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w := &countingWriter{ResponseWriter: rw}
		kind, model, version := "other", "", ""
		defer func() { metrics.observe(kind, model, version, w) }()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the bytes listener only reads: use GET or HEAD", http.StatusMethodNotAllowed)
			return
		}
		p := r.URL.Path
		if !strings.HasPrefix(p, "/") {
			http.Error(w, "bad path", http.StatusBadRequest)
			return
		}
		parts := strings.SplitN(p[1:], "/", 3)
		if len(parts) < 2 || CheckName("model", parts[0]) != nil || CheckName("version", parts[1]) != nil {
			http.Error(w, "ask for /<model>/<version>/ (the manifest) or /<model>/<version>/<file>", http.StatusNotFound)
			return
		}
		model, version = parts[0], parts[1]
		if len(parts) == 2 {
			http.Redirect(w, r, "/"+model+"/"+version+"/", http.StatusMovedPermanently)
			return
		}
		if parts[2] == "" {
			kind = "manifest"
			serveManifest(w, s, model, version, log)
			return
		}
		rel, err := dl.CleanRelPath(parts[2])
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		kind = "file"
		serveFile(w, r, s, model, version, rel, log)
	})
}

func serveManifest(w http.ResponseWriter, s *Store, model, version string, log *slog.Logger) {
	m, err := s.Manifest(model, version)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		http.Error(w, model+"/"+version+": not held by this mirror, or still downloading", http.StatusNotFound)
		return
	case err != nil:
		log.Error("building manifest", "model", model, "version", version, "err", err)
		http.Error(w, "building the manifest failed; see the mirror's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_ = json.NewEncoder(w).Encode(m)
}

func serveFile(w http.ResponseWriter, r *http.Request, s *Store, model, version, rel string, log *slog.Logger) {
	path := filepath.Join(s.Dir, model, version, filepath.FromSlash(rel))
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	sum, err := s.fileSHA256(path, st)
	if err != nil {
		log.Error("hashing file", "path", path, "err", err)
		http.Error(w, "hashing the file failed; see the mirror's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set(SHA256Header, sum)
	w.Header().Set("Content-Type", "application/octet-stream")
	// ServeContent answers Range (206, 416), HEAD, Content-Length and
	// Accept-Ranges; the ETag makes If-Range safe across a replaced file.
	w.Header().Set("ETag", `"`+sum+`"`)
	http.ServeContent(w, r, "", st.ModTime(), f)
}
