package konfig

import (
	"strings"
	"testing"
	"time"
)

type refInner struct {
	// Port is the port.
	Port int `koanf:"port"`
}

type refItem struct {
	// Name is the item's name.
	// Default: required.
	Name string `koanf:"name"`
}

type refConfig struct {
	// Listen is where it listens.
	// Type: address.
	Listen string `koanf:"listen"`
	// Wait is how long it waits.
	Wait time.Duration `koanf:"wait"`
	// Inner holds the port.
	Inner refInner `koanf:"inner"`
	// Items are the items.
	Items []refItem `koanf:"items"`
	// Tags serves as labels.
	Tags map[string]string `koanf:"tags"`
}

// TestReference: keys in declaration order with nested structs and lists
// of structs flattened, types named (or set by a Type: line), defaults
// from the value (or a Default: line), meanings without the field name.
func TestReference(t *testing.T) {
	// The types are in a _test.go file, which FieldDocs skips: their docs
	// are given here as FieldDocs keys them.
	docs := map[string]string{
		"github.com/llmgw/llmgw/internal/konfig.refConfig.Listen": "Listen is where it listens.\nType: address.\n",
		"github.com/llmgw/llmgw/internal/konfig.refConfig.Wait":   "Wait is how long it waits.\n",
		"github.com/llmgw/llmgw/internal/konfig.refInner.Port":    "Port is the port.\n",
		"github.com/llmgw/llmgw/internal/konfig.refConfig.Items":  "Items are the items.\n",
		"github.com/llmgw/llmgw/internal/konfig.refItem.Name":     "Name is the item's name.\nDefault: required.\n",
		"github.com/llmgw/llmgw/internal/konfig.refConfig.Tags":   "Tags serves as labels.\n",
	}
	got := Markdown(Reference(refConfig{Listen: ":80", Wait: 90 * time.Second, Inner: refInner{Port: 7}}, docs))
	want := "| Key | Type | Default | Meaning |\n| --- | --- | --- | --- |\n" +
		"| `listen` | address | `:80` | where it listens. |\n" +
		"| `wait` | duration | `1m30s` | how long it waits. |\n" +
		"| `inner.port` | int | `7` | the port. |\n" +
		"| `items` | list | none | the items. |\n" +
		"| `items[].name` | string | required | the item's name. |\n" +
		"| `tags` | map of strings | none | serves as labels. |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestFieldDocs reads the doc comments of a package's struct fields.
func TestFieldDocs(t *testing.T) {
	docs, err := FieldDocs("../../runtime/config", "github.com/llmgw/llmgw/runtime/config")
	if err != nil {
		t.Fatal(err)
	}
	if d := docs["github.com/llmgw/llmgw/runtime/config.Server.Listen"]; !strings.HasPrefix(d, "Listen is the client API") {
		t.Errorf("Server.Listen's doc = %q", d)
	}
}
