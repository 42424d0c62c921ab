package ctl

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestParseModelFile(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"the seed's example", coderYAML, ""},
		{"unknown top-level key", "name: m\nsorce: x\n", `m.yaml: line 2: unknown key "sorce" in the model`},
		{"unknown scaling key", "name: m\nscaling:\n  min: 1\n  idle: 5m\n", `m.yaml: line 4: unknown key "idle" in scaling`},
		{"unknown profile key", "name: m\nprofiles:\n- name: p\n  engine: vllm\n  gpus: 2\n", `m.yaml: line 5: unknown key "gpus" in a profile`},
		{"wrong type", "name: m\ncontext_length: lots\n", `m.yaml: line 2: cannot unmarshal !!str `},
		{"empty file", "", "m.yaml: the file is empty"},
		{"no name", "source: x\n", "m.yaml: no name"},
		{"two documents", "name: a\n---\nname: b\n", "m.yaml: more than one YAML document"},
		{"not YAML", "name: [\n", "reading model definition m.yaml: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseModelFile([]byte(tt.yaml), "m.yaml")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := modelToProto(m); !proto.Equal(got, wantCoder()) {
					t.Errorf("parsed:\n%v\nwant:\n%v", got, wantCoder())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
