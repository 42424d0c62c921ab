package spec

import (
	"reflect"
	"testing"
	"time"
)

// TestProfileEqualSeesEveryField changes one field of a profile at a time:
// Equal must tell each change apart, so that a field added to Profile and
// forgotten in Equal fails here rather than hiding a changed definition.
func TestProfileEqualSeesEveryField(t *testing.T) {
	base := Profile{Name: "p", Engine: "vllm", GPUClass: "h100-80g", TP: 2, Nodes: 2, Weight: 1, Priority: 100,
		StartupTimeout: Duration(time.Minute), MinMemoryGB: 8, MinDiskGB: 40, Labels: map[string]string{"zone": "eu"},
		Args: []string{"--x"}, Env: map[string]string{"A": "1"}, LaunchMode: "mp"}
	typ := reflect.TypeFor[Profile]()
	for i := range typ.NumField() {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "-changed")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"--changed"}))
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"changed": "1"}))
		default:
			t.Fatalf("Profile.%s has a kind (%s) this test cannot change: teach it", typ.Field(i).Name, f.Kind())
		}
		if base.Equal(changed) {
			t.Errorf("Profile.Equal does not see a change of %s", typ.Field(i).Name)
		}
	}
}
