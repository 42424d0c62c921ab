package spec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestDeclarationValidate(t *testing.T) {
	tests := []struct {
		name    string
		decl    Declaration
		wantErr string
	}{
		{name: "empty is valid", decl: Declaration{}},
		{name: "two fabrics", decl: Declaration{Fabrics: []Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0"}}, {Name: "ib-b", Adapters: []string{"mlx5_1"}}}}},
		{name: "adapter under two fabrics", decl: Declaration{Fabrics: []Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0"}}, {Name: "ib-b", Adapters: []string{"mlx5_0"}}}},
			wantErr: `fabrics[1].adapters: mlx5_0 is already under fabric "ib-a"`},
		{name: "fabric without name", decl: Declaration{Fabrics: []Fabric{{Adapters: []string{"mlx5_0"}}}}, wantErr: "fabrics[0].name: is required"},
		{name: "fabric without adapters", decl: Declaration{Fabrics: []Fabric{{Name: "ib-a"}}}, wantErr: "fabrics[0].adapters"},
		{name: "duplicate fabric", decl: Declaration{Fabrics: []Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0"}}, {Name: "ib-a", Adapters: []string{"mlx5_1"}}}}, wantErr: `fabric "ib-a" is already declared`},
		{name: "unknown engine", decl: Declaration{Engines: map[string]string{"tgi": "/opt/tgi"}}, wantErr: "engines.tgi: unknown engine"},
		{name: "empty engine path", decl: Declaration{Engines: map[string]string{"vllm": ""}}, wantErr: "engines.vllm: path is empty"},
		{name: "sim needs no path", decl: Declaration{Engines: map[string]string{"sim": ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.decl.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDeclarationFabricOf(t *testing.T) {
	d := Declaration{Fabrics: []Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}}}
	if got := d.FabricOf("mlx5_1"); got != "ib-a" {
		t.Fatalf("FabricOf(mlx5_1) = %q, want ib-a", got)
	}
	if got := d.FabricOf("mlx5_9"); got != "" {
		t.Fatalf("FabricOf(mlx5_9) = %q, want empty", got)
	}
}

// TestDeclarationProblems: Validate's error gives its problems by key, for
// a caller (the Terraform provider) that maps keys to its own attributes.
func TestDeclarationProblems(t *testing.T) {
	err := Declaration{Fabrics: []Fabric{{Name: "ib-a"}}, Engines: map[string]string{"vllm": ""}}.Validate()
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Validate() = %v, not Problems", err)
	}
	want := Problems{{Key: "fabrics[0].adapters", Msg: "a fabric needs at least one adapter"}, {Key: "engines.vllm", Msg: "path is empty"}}
	if !slices.Equal(ps, want) {
		t.Fatalf("problems = %v, want %v", ps, want)
	}
	if got := err.Error(); got != "invalid node declaration: fabrics[0].adapters: a fabric needs at least one adapter; engines.vllm: path is empty" {
		t.Fatalf("Error() = %q", got)
	}
}
