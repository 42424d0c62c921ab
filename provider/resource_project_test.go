package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"google.golang.org/protobuf/proto"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

func TestProjectFromAPI(t *testing.T) {
	tests := []struct {
		name string
		in   *managev1.Project
	}{
		{"defaults", &managev1.Project{Name: "team-a"}},
		{"limits and models", &managev1.Project{Name: "team-a", Rpm: 60, Tpm: 1000, AllowedModels: []string{"small", "big"}}},
		{"retentions", &managev1.Project{Name: "team-a", ThreadsRetainHours: proto.Int32(24), MemoryRetainHours: proto.Int32(720)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := projectFromAPI(tt.in)
			if m.AllowedModels.IsNull() || len(m.AllowedModels.Elements()) != len(tt.in.GetAllowedModels()) {
				t.Fatalf("allowed_models = %v: an empty set, never null, so a plan after apply is empty", m.AllowedModels)
			}
			back := m.toAPI()
			if back.GetName() != tt.in.GetName() || back.GetRpm() != tt.in.GetRpm() || back.GetTpm() != tt.in.GetTpm() ||
				len(back.GetAllowedModels()) != len(tt.in.GetAllowedModels()) ||
				back.GetThreadsRetainHours() != tt.in.GetThreadsRetainHours() || back.GetMemoryRetainHours() != tt.in.GetMemoryRetainHours() ||
				back.ThreadsRetainHours == nil || back.MemoryRetainHours == nil {
				t.Fatalf("round trip = %v, want %v", back, tt.in)
			}
		})
	}
}

func TestProjectNameRule(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"team-a", true}, {"Team_A.1", true}, {"-a", false}, {"a/b", false}, {"a b", false}, {"", false}, {strings.Repeat("a", 64), false},
	}
	for _, tt := range tests {
		if got := spec.ProjectNameRE.MatchString(tt.name); got != tt.ok {
			t.Errorf("spec.ProjectNameRE(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
}

func TestAddWarnings(t *testing.T) {
	var d diag.Diagnostics
	addWarnings(&d, "budget p/day", []string{"never binds"})
	if d.WarningsCount() != 1 || d.HasError() || !strings.Contains(d[0].Detail(), "never binds") || !strings.Contains(d[0].Summary(), "budget p/day") {
		t.Fatalf("diagnostics = %v", d)
	}
}

// TestProjectRetentionDescriptions: the retention attributes say what the
// store does (reads check the current retention, so lowering it or
// turning it to 0 ends access at once; storetest's retention cut tests
// that), not that kept content stays readable until the hourly prune.
func TestProjectRetentionDescriptions(t *testing.T) {
	var resp resource.SchemaResponse
	(&projectResource{}).Schema(t.Context(), resource.SchemaRequest{}, &resp)
	for _, name := range []string{"threads_retain_hours", "memory_retain_hours"} {
		d := resp.Schema.Attributes[name].GetMarkdownDescription()
		if !strings.Contains(d, "ends access to all of") || !strings.Contains(d, "at once") || !strings.Contains(d, "hourly prune then deletes") {
			t.Errorf("%s: description %q does not say that access ends at once and the prune deletes later", name, d)
		}
		if strings.Contains(d, "deletes what was kept at the next hourly prune") {
			t.Errorf("%s: description still says content lasts until the prune: %q", name, d)
		}
	}
}
