package manage

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/sourcecheck"
)

// TestSourceCheck: create, update and plan refuse a model whose source
// answers 404, naming the source and the answer, and add nothing to the
// catalog; a source the control plane cannot reach is accepted with a
// warning that the check was skipped; a present source is accepted without
// a warning.
func TestSourceCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/m/v/weights.bin" {
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	unreachable := "http://" + closed.Addr().String() + "/m/v/weights.bin"
	closed.Close()

	s, _ := newService(t)
	s.opts.Sources = &sourcecheck.Checker{Timeout: time.Second}
	ctx := context.Background()
	model := func(name, source string) *managev1.Model {
		m := apiModel(name)
		m.Source, m.Scaling.Min = source, 0 // no scaling warning: only the source's
		return m
	}

	missing := srv.URL + "/m/v/typo.bin"
	if _, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: model("bad", missing)}); code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "HEAD") || !strings.Contains(err.Error(), "404 Not Found") {
		t.Fatalf("create with a missing file: %v; want InvalidArgument naming %s and its 404", err, missing)
	}
	if _, ok := s.opts.Catalog.Get("bad"); ok {
		t.Fatal("the refused model is in the catalog")
	}
	if _, err := s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: model("bad", missing)}); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), missing) {
		t.Fatalf("plan with a missing file: %v", err)
	}

	got, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: model("ok", srv.URL+"/m/v/weights.bin")})
	if err != nil || len(got.GetWarnings()) != 0 {
		t.Fatalf("create with a present file: warnings %q, err %v; want neither", got.GetWarnings(), err)
	}
	if _, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: model("ok", missing)}); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), missing) {
		t.Fatalf("update to a missing file: %v", err)
	}
	if e, _ := s.opts.Catalog.Get("ok"); e.Model.Source != srv.URL+"/m/v/weights.bin" {
		t.Fatalf("the refused update changed the source to %s", e.Model.Source)
	}

	got, err = s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: model("ok", unreachable)})
	if err != nil || len(got.GetWarnings()) != 1 || !strings.Contains(got.GetWarnings()[0], "check skipped") || !strings.Contains(got.GetWarnings()[0], unreachable) {
		t.Fatalf("update to an unreachable source: warnings %q, err %v; want one skipped-check warning", got.GetWarnings(), err)
	}
	ex, err := s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: model("other", unreachable)})
	if err != nil || len(ex.GetWarnings()) != 1 || !strings.Contains(ex.GetWarnings()[0], "cannot reach") {
		t.Fatalf("plan with an unreachable source: warnings %q, err %v", ex.GetWarnings(), err)
	}
}
