package konfig

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

type marshalSection struct {
	Grace time.Duration `koanf:"grace" yaml:"grace"`
	Off   bool          `koanf:"off" yaml:"off"`
}

type marshalConfig struct {
	ID      string            `koanf:"id" yaml:"id,omitempty"`
	Listen  string            `koanf:"listen" yaml:"listen"`
	Pprof   string            `koanf:"pprof" yaml:"pprof"`
	Section marshalSection    `koanf:"section" yaml:"section"`
	Labels  map[string]string `koanf:"labels" yaml:"labels,omitempty"`
	Dirs    []string          `koanf:"dirs" yaml:"dirs,omitempty"`
}

func marshalDefaults() marshalConfig {
	return marshalConfig{Listen: ":80", Pprof: "127.0.0.1:6060", Section: marshalSection{Grace: 30 * time.Second}}
}

// TestMarshalRoundTrip writes values and reads them back with Parse onto
// the defaults: every value comes back, and only what differs from the
// defaults is written.
func TestMarshalRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*marshalConfig)
		want string
	}{
		{"defaults write nothing", func(*marshalConfig) {}, "# header\n"},
		{"a changed key alone in its section", func(c *marshalConfig) { c.Section.Grace = 90 * time.Second },
			"# header\nsection:\n  grace: 1m30s\n"},
		{"an empty string that is not the default is written", func(c *marshalConfig) { c.Pprof = "" },
			"# header\npprof: \"\"\n"},
		{"false over a default false is not written, true is", func(c *marshalConfig) { c.Section.Off = true; c.ID = "n1" },
			"# header\nid: n1\nsection:\n  \"off\": true\n"},
		{"maps and lists", func(c *marshalConfig) {
			c.Labels = map[string]string{"b": "true", "a": "x y"}
			c.Dirs = []string{"/m1", "/m2"}
		}, "# header\nlabels:\n  a: x y\n  b: \"true\"\ndirs:\n  - /m1\n  - /m2\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := marshalDefaults()
			tt.edit(&c)
			b, err := Marshal(c, marshalDefaults(), "header")
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("Marshal wrote\n%s\nwant\n%s", b, tt.want)
			}
			got := marshalDefaults()
			if err := Parse(b, "written", &got); err != nil {
				t.Fatalf("Parse of what Marshal wrote: %v\n%s", err, b)
			}
			if !reflect.DeepEqual(got, c) {
				t.Errorf("round trip = %+v, want %+v", got, c)
			}
		})
	}
}

// TestMarshalRefusesDroppedDefault: an omitempty field holding its zero
// value where the default is not zero would read back as the default.
func TestMarshalRefusesDroppedDefault(t *testing.T) {
	type cfg struct {
		Port int `koanf:"port" yaml:"port,omitempty"`
	}
	_, err := Marshal(cfg{}, cfg{Port: 80}, "")
	if err == nil || !strings.Contains(err.Error(), "port: the value cannot be written") {
		t.Fatalf("Marshal = %v, want an error naming port", err)
	}
}
