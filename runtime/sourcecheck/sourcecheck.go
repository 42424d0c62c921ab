// Package sourcecheck asks a model's fetched source whether it holds what
// the model names, when the model is added or planned, so that a typo or a
// missing file is an error then rather than a replica failing later.
//
// It refuses only a clear miss (404, 410, 401, 403 from the source). When
// the control plane cannot reach the source (connection refused, DNS, a
// timeout, a 5xx) it does not refuse: the nodes may reach what the control
// plane cannot, so it answers with a warning saying it skipped the check.
package sourcecheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/spec"
)

// DefaultTimeout bounds one check.
const DefaultTimeout = 5 * time.Second

// DefaultHFEndpoint is the Hugging Face hub, used when neither the checker
// nor HF_ENDPOINT name another (as the agent's fetch does).
const DefaultHFEndpoint = "https://huggingface.co"

// Checker checks sources over HTTP.
type Checker struct {
	// Client makes the requests (http.DefaultClient's transport when nil).
	Client *http.Client
	// Timeout bounds one check (DefaultTimeout when zero).
	Timeout time.Duration
	// HFEndpoint is the hub's base URL for hf: sources ("" means
	// $HF_ENDPOINT, else DefaultHFEndpoint).
	HFEndpoint string
	// HFToken, when set, is sent to HFEndpoint. Without one, the hub's 401
	// and 403 (its answer for gated and private repositories) are not a
	// refusal: the nodes may hold a token.
	HFToken string
	Logger  *slog.Logger
}

// MissError is a clear miss: the source answered that it does not hold
// what the model names.
type MissError struct {
	Source string
	// Asked is the request made ("HEAD https://…").
	Asked string
	// Status is the answer ("404 Not Found").
	Status string
}

func (e *MissError) Error() string {
	return fmt.Sprintf("source %s: %s answered %s", e.Source, e.Asked, e.Status)
}

// Check asks the source named by raw. It returns a *MissError for a clear
// miss, a warning (and nil) when it could not tell, and "" and nil when the
// source holds it or is not fetched (a local path, a repository id, sim://).
func (c *Checker) Check(ctx context.Context, raw string) (warning string, err error) {
	src, err := spec.ParseSource(raw)
	if err != nil || !src.Fetched() {
		return "", nil // Validate reports a bad source; the rest are not fetched
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	method, target, hf := http.MethodHead, "", false
	switch src.Kind {
	case spec.SourceURL:
		target = src.URL.String()
	case spec.SourceSet:
		method, target = http.MethodGet, src.URL.String()
	case spec.SourceHF:
		hf = true
		rev := src.Revision
		if rev == "" {
			rev = "main"
		}
		if src.Path == "" {
			// A whole revision: the hub's model info for it.
			method, target = http.MethodGet, c.hfEndpoint()+"/api/models/"+src.Repo+"/revision/"+url.PathEscape(rev)
		} else {
			target = c.hfEndpoint() + "/" + src.Repo + "/resolve/" + url.PathEscape(rev) + "/" + src.Path
		}
	case spec.SourceS3:
		// The credentials and endpoint are the nodes' (AWS_* in their
		// environment), not the control plane's.
		w := fmt.Sprintf("source %s: check skipped: s3:// sources are read with the nodes' credentials, which the control plane does not hold", raw)
		log.Debug("source check skipped", "source", raw)
		return w, nil
	}
	asked := method + " " + target
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", raw, err)
	}
	req.Header.Set("User-Agent", buildinfo.UserAgent("llmgw-server"))
	if hf && c.HFToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.HFToken)
	}
	client := c.Client
	if client == nil {
		client = &http.Client{}
	}
	resp, err := client.Do(req)
	if err != nil {
		why := err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			why = fmt.Sprintf("no answer within %s", timeout)
		}
		w := fmt.Sprintf("source %s: check skipped: the control plane cannot reach it (%s: %s); the nodes may", raw, asked, why)
		log.Warn("source check skipped", "source", raw, "asked", asked, "err", err)
		return w, nil
	}
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		log.Debug("source checked", "source", raw, "asked", asked, "status", resp.Status)
		return "", nil
	case (code == http.StatusUnauthorized || code == http.StatusForbidden) && hf && c.HFToken == "":
		w := fmt.Sprintf("source %s: check skipped: %s answered %s to the control plane, which has no hub token; the nodes may have one", raw, asked, resp.Status)
		log.Warn("source check skipped", "source", raw, "asked", asked, "status", resp.Status)
		return w, nil
	case code == http.StatusNotFound || code == http.StatusGone || code == http.StatusUnauthorized || code == http.StatusForbidden:
		log.Info("source check refused", "source", raw, "asked", asked, "status", resp.Status)
		return "", &MissError{Source: raw, Asked: asked, Status: resp.Status}
	default:
		w := fmt.Sprintf("source %s: check skipped: %s answered %s", raw, asked, resp.Status)
		log.Warn("source check skipped", "source", raw, "asked", asked, "status", resp.Status)
		return w, nil
	}
}

func (c *Checker) hfEndpoint() string {
	u := c.HFEndpoint
	if u == "" {
		u = os.Getenv("HF_ENDPOINT")
	}
	if u == "" {
		u = DefaultHFEndpoint
	}
	return strings.TrimSuffix(u, "/")
}
