package provider

import (
	"strings"
	"testing"
)

func TestParseMirrorImportID(t *testing.T) {
	for _, tc := range []struct {
		id, mirror, model, version, err string
	}{
		{id: "https://models.internal:8082/qwen2.5-14b/2026-03", mirror: "https://models.internal:8082", model: "qwen2.5-14b", version: "2026-03"},
		{id: "http://127.0.0.1:8082/m/v1/", mirror: "http://127.0.0.1:8082", model: "m", version: "v1"},
		{id: "models.internal:8082/m/v", err: "use <mirror management URL>/<model>/<version>"},
		{id: "https://models.internal:8082/m", err: "use <mirror"},
		{id: "https://models.internal:8082/m/v/extra", err: "use <mirror"},
		{id: "https://models.internal:8082/.m/v", err: "use <mirror"},
		{id: "ftp://h/m/v", err: "use <mirror"},
	} {
		mirror, model, version, err := parseMirrorImportID(tc.id)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.id) {
				t.Errorf("%s: err %v, want one naming the id and saying %q", tc.id, err, tc.err)
			}
			continue
		}
		if err != nil || mirror != tc.mirror || model != tc.model || version != tc.version {
			t.Errorf("%s: %q %q %q, %v", tc.id, mirror, model, version, err)
		}
	}
}

// TestMirrorClientNeedsPKI: an https mirror needs the provider's pki to sign
// a client certificate; the error says what to set. A plain http mirror
// needs nothing, and a mirror that is not a URL is refused by name.
func TestMirrorClientNeedsPKI(t *testing.T) {
	c := &Client{}
	if _, err := c.mirror("https://models.internal:8082"); err == nil || !strings.Contains(err.Error(), "set pki = {") {
		t.Errorf("https without pki: %v", err)
	}
	if mc, err := c.mirror("http://models.internal:8082/"); err != nil || mc.base != "http://models.internal:8082" {
		t.Errorf("http: %v, %+v", err, mc)
	}
	if _, err := c.mirror("models.internal:8082"); err == nil || !strings.Contains(err.Error(), `"models.internal:8082" is not an http(s) URL`) {
		t.Errorf("not a URL: %v", err)
	}
}
