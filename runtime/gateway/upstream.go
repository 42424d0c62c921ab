package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

// statusClientGone is recorded when the client left before a response was
// sent (nginx's convention; never written to the wire).
const statusClientGone = 499

// maxBufferedResponse is the largest non-streamed response held in memory
// to read its usage; a larger one is relayed as it arrives and its usage is
// looked for in its tail.
const maxBufferedResponse = 32 << 20

// newTransport returns the transport shared by every upstream request:
// HTTP/1.1 with many idle connections per engine, no compression (bytes are
// relayed as the engine wrote them).
func newTransport(headerTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		// Each open connection holds both buffers: at 32 KiB, 1,000
		// streams held 64 MB of them (BenchmarkSoak1000Streams).
		WriteBufferSize: 8 << 10,
		ReadBufferSize:  8 << 10,
	}
}

// hopHeaders are not relayed from the engine to the client.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
}

func copyResponseHeaders(dst, src http.Header) {
	for k, vv := range src {
		if k == requestIDHeader {
			continue // the gateway's id wins
		}
		dst[k] = vv
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
}

// proxy sends body to the endpoint and relays the answer.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, body []byte) {
	if x.ticket == nil { // every spending route admits first (gateway.go, spending)
		g.log.Error("request reached the engine without admission", "endpoint", x.rec.Endpoint)
		x.fail(w, newError(http.StatusInternalServerError, typeServer, "", "the request was not admitted"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.GenerationTimeout)
	defer cancel()
	target := strings.TrimSuffix(ep.URL, "/") + r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		g.log.Warn("building upstream request", "replica", ep.ReplicaID, "err", err)
		x.fail(w, newError(http.StatusBadGateway, typeUpstream, "upstream_error", "the model's replica cannot be reached"))
		return
	}
	up.Header = http.Header{
		"Content-Type":  {"application/json"},
		requestIDHeader: {x.rec.RequestID},
	}
	if a := r.Header.Get("Accept"); a != "" {
		up.Header.Set("Accept", a)
	}
	x.sent = true
	resp, err := g.transport.RoundTrip(up)
	if err != nil {
		g.upstreamFailed(w, r, x, ep, err)
		return
	}
	defer resp.Body.Close()

	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		g.relayStream(w, r, x, resp)
		return
	}
	g.relayBody(w, r, x, ep, resp)
}

// upstreamFailed answers a request whose upstream failed before anything
// was sent to the client.
func (g *Gateway) upstreamFailed(w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, err error) {
	if r.Context().Err() != nil {
		x.rec.Status = statusClientGone
		return
	}
	g.log.Warn("upstream request", "replica", ep.ReplicaID, "model", x.rec.Model, "err", err)
	x.fail(w, newError(http.StatusBadGateway, typeUpstream, "upstream_error",
		"the model's replica failed before answering; retry the request"))
}

// relayBody relays a non-streamed response and reads its usage.
func (g *Gateway) relayBody(w http.ResponseWriter, r *http.Request, x *exchange, ep router.Endpoint, resp *http.Response) {
	size := 4 << 10
	if resp.ContentLength > 0 && resp.ContentLength <= maxBufferedResponse {
		size = int(resp.ContentLength) + 1
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBufferedResponse+1))
	if err != nil {
		g.upstreamFailed(w, r, x, ep, err)
		return
	}
	data := buf.Bytes()
	copyResponseHeaders(w.Header(), resp.Header)
	x.rec.Status = resp.StatusCode
	if len(data) <= maxBufferedResponse {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(data)
		if resp.StatusCode == http.StatusOK {
			x.usage = bodyUsage(data)
		}
		return
	}
	// Too large to hold: relay the rest as it comes, keeping a tail.
	w.WriteHeader(resp.StatusCode)
	if _, err := w.Write(data); err != nil {
		return
	}
	tail := &tailBuffer{max: 8 << 10}
	_, _ = tail.Write(data) // a tailBuffer never fails to write
	if _, err := io.Copy(w, io.TeeReader(resp.Body, tail)); err != nil {
		g.log.Debug("relaying large response", "replica", ep.ReplicaID, "err", err)
		return
	}
	if resp.StatusCode == http.StatusOK {
		x.usage = tailUsage(tail.b)
	}
}

// usageJSON is OpenAI's usage object.
type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (u *usageJSON) usage() request.Usage {
	if u == nil {
		return request.Usage{}
	}
	return request.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens, Reported: true}
}

// bodyUsage reads the usage object of a complete response body.
func bodyUsage(data []byte) request.Usage {
	var v struct {
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil {
		return request.Usage{}
	}
	return v.Usage.usage()
}

// tailUsage finds the last "usage" object in the tail of a response. A
// quote inside a JSON string is escaped, so `"usage"` cannot be string
// content.
func tailUsage(tail []byte) request.Usage {
	i := bytes.LastIndex(tail, []byte(`"usage"`))
	if i < 0 {
		return request.Usage{}
	}
	rest := tail[skipColon(tail, i+len(`"usage"`)):]
	var u *usageJSON
	if json.NewDecoder(bytes.NewReader(rest)).Decode(&u) != nil {
		return request.Usage{}
	}
	return u.usage()
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.b = append(t.b[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}
