package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/runtime/leader"
)

// TestRelayRefusesSecondHop: a standby that gets a call another standby
// relayed to it (the two disagree on who leads) refuses it, naming the
// relaying control plane, instead of relaying it on.
func TestRelayRefusesSecondHop(t *testing.T) {
	h := &ha{name: "cp-b", el: leader.New(leader.Options{Name: "cp-b"})}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(relayedHeader, "cp-a", "authorization", "Bearer x"))
	called := false
	_, err := h.relay(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/llmgw.manage.v1.Manage/ListModels"}, func(context.Context, any) (any, error) {
		called = true
		return nil, nil
	})
	if called {
		t.Fatal("a standby answered a relayed call itself")
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "relayed by control plane cp-a") {
		t.Errorf("relayed call to a standby: %v; want Unavailable naming cp-a", err)
	}
}
