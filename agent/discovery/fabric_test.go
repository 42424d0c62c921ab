package discovery

import (
	"reflect"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

func TestEvaluateFabrics(t *testing.T) {
	tests := []struct {
		name       string
		sysfs      map[string]map[string]sysPort
		decl       []spec.Fabric
		inService  []bool
		rates      []float64
		problems   [][]string // substrings, per fabric, in order
		wantReason []string   // substring of Reason(), per fabric
	}{
		{
			name:       "all active at HDR",
			sysfs:      map[string]map[string]sysPort{"mlx5_0": {"1": activeHDR}, "mlx5_1": {"1": activeHDR}},
			decl:       []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
			inService:  []bool{true},
			rates:      []float64{200},
			problems:   [][]string{nil},
			wantReason: []string{"in service at 200 Gb/s"},
		},
		{
			name:       "mixed rates: the slowest wins",
			sysfs:      map[string]map[string]sysPort{"mlx5_0": {"1": activeHDR}, "mlx5_1": {"1": activeEDR}},
			decl:       []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
			inService:  []bool{true},
			rates:      []float64{100},
			problems:   [][]string{nil},
			wantReason: []string{"in service at 100 Gb/s"},
		},
		{
			name: "one active port is enough; inactive ones do not lower the rate",
			sysfs: map[string]map[string]sysPort{
				"mlx5_0": {"1": downPort, "2": activeHDR},
			},
			decl:       []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0"}}},
			inService:  []bool{true},
			rates:      []float64{200},
			problems:   [][]string{nil},
			wantReason: []string{"in service at 200 Gb/s"},
		},
		{
			name:      "INIT port: no subnet manager",
			sysfs:     map[string]map[string]sysPort{"mlx5_0": {"1": initNoSM}, "mlx5_1": {"1": activeHDR}},
			decl:      []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
			inService: []bool{false},
			rates:     []float64{0},
			problems: [][]string{{
				"adapter mlx5_0 has no ACTIVE port (port 1: INIT); port 1 has a physical link but no subnet manager has activated it",
			}},
			wantReason: []string{"adapter mlx5_0 has no ACTIVE port (port 1: INIT)"},
		},
		{
			name:       "missing adapter",
			sysfs:      map[string]map[string]sysPort{"mlx5_0": {"1": activeHDR}},
			decl:       []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
			inService:  []bool{false},
			rates:      []float64{0},
			problems:   [][]string{{"adapter mlx5_1 not found under ROOT"}},
			wantReason: []string{"adapter mlx5_1 not found under ROOT"},
		},
		{
			name: "two fabrics, one down, two problems joined",
			sysfs: map[string]map[string]sysPort{
				"mlx5_0": {"1": activeHDR}, "mlx5_1": {"1": activeEDR},
				"mlx5_2": {"1": downPort, "2": disabled},
			},
			decl: []spec.Fabric{
				{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}},
				{Name: "ib-b", Adapters: []string{"mlx5_2", "mlx5_3"}},
			},
			inService: []bool{true, false},
			rates:     []float64{100, 0},
			problems: [][]string{nil, {
				"adapter mlx5_2 has no ACTIVE port (port 1: DOWN, port 2: DOWN)",
				"adapter mlx5_3 not found under ROOT",
			}},
			wantReason: []string{"in service at 100 Gb/s", "adapter mlx5_2 has no ACTIVE port (port 1: DOWN, port 2: DOWN); adapter mlx5_3 not found under ROOT"},
		},
		{
			name:       "no sysfs at all",
			decl:       []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0"}}},
			inService:  []bool{false},
			rates:      []float64{0},
			problems:   [][]string{{"adapter mlx5_0 not found under ROOT"}},
			wantReason: []string{"not found"},
		},
		{
			name:       "adapter without ports",
			sysfs:      map[string]map[string]sysPort{"mlx5_0": {}},
			decl:       []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0"}}},
			inService:  []bool{false},
			rates:      []float64{0},
			problems:   [][]string{{"adapter mlx5_0 has no ACTIVE port (no ports under ROOT/mlx5_0/ports)"}},
			wantReason: []string{"no ports"},
		},
		{
			name:       "no fabrics declared",
			sysfs:      map[string]map[string]sysPort{"mlx5_0": {"1": activeHDR}},
			inService:  []bool{},
			rates:      []float64{},
			problems:   [][]string{},
			wantReason: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeSysfs(t, root, tt.sysfs)
			found, err := ProbeInfiniBand(root)
			if err != nil {
				t.Fatal(err)
			}
			got := EvaluateFabrics(tt.decl, found, root)
			if len(got) != len(tt.decl) {
				t.Fatalf("got %d verdicts, want %d", len(got), len(tt.decl))
			}
			for i, v := range got {
				if v.Name != tt.decl[i].Name || !reflect.DeepEqual(v.Adapters, tt.decl[i].Adapters) {
					t.Errorf("verdict %d is %s %v, want %s %v", i, v.Name, v.Adapters, tt.decl[i].Name, tt.decl[i].Adapters)
				}
				if v.InService != tt.inService[i] || v.RateGbps != tt.rates[i] {
					t.Errorf("%s: InService=%v RateGbps=%v, want %v %v", v.Name, v.InService, v.RateGbps, tt.inService[i], tt.rates[i])
				}
				if len(v.Problems) != len(tt.problems[i]) {
					t.Fatalf("%s: problems %q, want %d", v.Name, v.Problems, len(tt.problems[i]))
				}
				for j, want := range tt.problems[i] {
					want = strings.ReplaceAll(want, "ROOT", root)
					if v.Problems[j] != want {
						t.Errorf("%s: problem %d = %q, want %q", v.Name, j, v.Problems[j], want)
					}
				}
				if want := strings.ReplaceAll(tt.wantReason[i], "ROOT", root); !strings.Contains(v.Reason(), want) {
					t.Errorf("%s: Reason() = %q, want containing %q", v.Name, v.Reason(), want)
				}
				if len(v.Checks) != len(tt.decl[i].Adapters) {
					t.Errorf("%s: %d checks, want one per adapter", v.Name, len(v.Checks))
				}
			}
		})
	}
}

func TestAdapterCheckFound(t *testing.T) {
	root := t.TempDir()
	writeSysfs(t, root, map[string]map[string]sysPort{"mlx5_0": {"1": initNoSM}})
	found, err := ProbeInfiniBand(root)
	if err != nil {
		t.Fatal(err)
	}
	v := EvaluateFabrics([]spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_9"}}}, found, root)[0]
	want := []AdapterCheck{
		{Adapter: "mlx5_0", Present: true, Active: false, Found: "port 1: INIT, phys LinkUp, 200 Gb/s, InfiniBand"},
		{Adapter: "mlx5_9", Present: false, Active: false, Found: "no such adapter under " + root},
	}
	if !reflect.DeepEqual(v.Checks, want) {
		t.Fatalf("Checks = %+v\nwant %+v", v.Checks, want)
	}
}
