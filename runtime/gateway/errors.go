package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// OpenAI error types.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuthentication = "authentication_error"
	typeServer         = "server_error"
	typeUnavailable    = "service_unavailable"
	typeUpstream       = "upstream_error"
)

// apiError is an error response in OpenAI's shape.
type apiError struct {
	status     int
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       *string `json:"code"`
	retryAfter time.Duration
}

func newError(status int, typ, code, message string) *apiError {
	e := &apiError{status: status, Message: message, Type: typ}
	if code != "" {
		e.Code = &code
	}
	return e
}

func (e *apiError) withParam(p string) *apiError {
	e.Param = &p
	return e
}

func (e *apiError) withRetryAfter(d time.Duration) *apiError {
	e.retryAfter = d
	return e
}

// writeError sends e as {"error":{...}} with its status.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		secs := int64((e.retryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	body, _ := json.Marshal(struct {
		Error *apiError `json:"error"`
	}{e})
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}
