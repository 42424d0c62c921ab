package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/runtime/request"
)

// modelObject is OpenAI's model object. Aliases is an llmgw extension that
// OpenAI clients ignore.
type modelObject struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	OwnedBy string   `json:"owned_by"`
	Aliases []string `json:"aliases,omitempty"`
}

func toModelObject(m ModelInfo) modelObject {
	owner := m.OwnedBy
	if owner == "" {
		owner = "llmgw"
	}
	return modelObject{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: owner, Aliases: m.Aliases}
}

// serveModels lists the catalog. Aliases are not listed as models of their
// own: they would show every model several times in pickers and usage
// dashboards. They appear in each model's "aliases" field, and
// GET /v1/models/{alias} resolves them.
func (g *Gateway) serveModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	p, aerr := g.authenticate(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	list := g.deps.Catalog.List()
	data := make([]modelObject, 0, len(list))
	for _, m := range list {
		if g.allows(r, p, m.ID) {
			data = append(data, toModelObject(m))
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{"list", data})
}

// serveModel answers GET /v1/models/{model}; the name may contain slashes.
func (g *Gateway) serveModel(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	p, aerr := g.authenticate(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	m, ok := g.deps.Catalog.Lookup(name)
	canonical := m.Name
	if ok && g.allows(r, p, canonical) {
		for _, m := range g.deps.Catalog.List() {
			if m.ID == canonical {
				writeJSON(w, http.StatusOK, toModelObject(m))
				return
			}
		}
	}
	writeError(w, newError(http.StatusNotFound, typeInvalidRequest, "model_not_found",
		fmt.Sprintf("the model %q does not exist", name)).withParam("model"))
}

// allows reports whether the principal may see the model: when admission
// also filters models (a project's allowed_models), a model the project may
// not use is not shown, as OpenAI hides models a key cannot use.
func (g *Gateway) allows(r *http.Request, p request.Principal, model string) bool {
	f, ok := g.deps.Admission.(ModelFilter)
	return !ok || f.Allows(r.Context(), p, model)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, newError(http.StatusInternalServerError, typeServer, "", "encoding the response"))
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// serveHealth answers 200 while the process is alive.
func (g *Gateway) serveHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveReady answers 200 when the process serves requests, else 503.
func (g *Gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	if g.deps.Ready != nil && !g.deps.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
