package specpb

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/spec"
)

// fullProfile sets every field of spec.Profile to a value other than its
// zero, by reflection, so that a field added to spec.Profile and forgotten
// in the conversion fails the round trip below.
func fullProfile(t *testing.T) spec.Profile {
	t.Helper()
	var p spec.Profile
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch {
		case f.Type() == reflect.TypeFor[spec.Duration]():
			f.Set(reflect.ValueOf(spec.Duration(90 * time.Second)))
		case f.Kind() == reflect.String:
			f.SetString("value-of-" + name)
		case f.Kind() == reflect.Int:
			f.SetInt(int64(i + 1))
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			f.Set(reflect.ValueOf([]string{name, "--x"}))
		case f.Kind() == reflect.Map && f.Type().Key().Kind() == reflect.String && f.Type().Elem().Kind() == reflect.String:
			f.Set(reflect.ValueOf(map[string]string{name: "1"}))
		default:
			t.Fatalf("spec.Profile.%s has a type (%s) this test cannot fill: teach it", name, f.Type())
		}
	}
	return p
}

func TestProfileRoundTripEveryField(t *testing.T) {
	p := fullProfile(t)
	back, err := ProfileFromProto(ProfileToProto(p))
	if err != nil {
		t.Fatal(err)
	}
	bv, pv := reflect.ValueOf(back), reflect.ValueOf(p)
	for i := range pv.NumField() {
		if !reflect.DeepEqual(bv.Field(i).Interface(), pv.Field(i).Interface()) {
			t.Errorf("spec.Profile.%s: sent %v, came back %v: convert it in ProfileToProto and ProfileFromProto",
				pv.Type().Field(i).Name, pv.Field(i).Interface(), bv.Field(i).Interface())
		}
	}
	if !back.Equal(p) {
		t.Errorf("spec.Profile.Equal says the round trip changed the profile: a field is missing from Equal or from the conversion")
	}
}

// The agent protocol carries the same message: a profile sent in a
// StartShard comes back from the wire unchanged.
func TestProfileInStartShard(t *testing.T) {
	p := fullProfile(t)
	b, err := proto.Marshal(&agentv1.StartShard{ShardId: "r-0", Profile: ProfileToProto(p)})
	if err != nil {
		t.Fatal(err)
	}
	var m agentv1.StartShard
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	back, err := ProfileFromProto(m.GetProfile())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, p) {
		t.Fatalf("profile through StartShard:\n got %+v\nwant %+v", back, p)
	}
}

func TestProfileFromProto(t *testing.T) {
	if p, err := ProfileFromProto(nil); err != nil || !reflect.DeepEqual(p, spec.Profile{}) {
		t.Fatalf("ProfileFromProto(nil) = %+v, %v; want the zero profile", p, err)
	}
	p, err := ProfileFromProto(&specv1.Profile{Name: "tp2", Nodes: 2, StartupTimeout: "soon"})
	if err == nil || err.Error() != `startup_timeout: cannot parse "soon" as a duration` {
		t.Fatalf("err = %v", err)
	}
	if p.Name != "tp2" || p.Nodes != 2 || p.StartupTimeout != 0 {
		t.Fatalf("with the error, profile = %+v; want the rest converted and no startup timeout", p)
	}
}
