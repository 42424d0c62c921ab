// Package mirrorv1 is the wire shape of the weights mirror's management API
// (JSON over HTTP on its management listener) and of its byte protocol's
// manifest: the mirror answers with these types, the Terraform provider
// and other clients read them. See docs/mirror.md.
package mirrorv1

import "time"

// Download states.
const (
	StateDownloading = "downloading"
	StateComplete    = "complete"
	StateFailed      = "failed"
)

// DownloadRequest is the body of POST /v1/downloads.
type DownloadRequest struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	Source  string `json:"source"`
}

// DownloadStatus is one download as GET /v1/downloads lists it.
type DownloadStatus struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	Source  string `json:"source"`
	State   string `json:"state"`
	Bytes   int64  `json:"bytes"`
	// Total is absent while the source has not said.
	Total *int64 `json:"total,omitempty"`
	// RateBytesPerSecond is the average since the download started.
	RateBytesPerSecond float64    `json:"rate_bytes_per_second"`
	LastError          string     `json:"last_error,omitempty"`
	Started            time.Time  `json:"started"`
	Finished           *time.Time `json:"finished,omitempty"`
}

// File is one file of a version.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// Manifest is what GET /<model>/<version>/ answers on the bytes listener.
type Manifest struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	Files   []File `json:"files"`
}

// Holding is one version the mirror holds, as GET /v1/holdings lists it.
type Holding struct {
	Model    string `json:"model"`
	Version  string `json:"version"`
	Complete bool   `json:"complete"`
	// Downloading is true while a download started by this mirror runs.
	Downloading bool   `json:"downloading"`
	Bytes       int64  `json:"bytes"`
	Files       []File `json:"files"`
	// URL is the version's address on the bytes listener (a set's source),
	// when the mirror was given its base URL.
	URL string `json:"url,omitempty"`
}
