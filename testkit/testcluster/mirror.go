package testcluster

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/mirror"
)

// MirrorServedBytes reads llmgw_mirror_served_bytes_total for model and
// version from an in-process mirror's metrics; 0 when it served none.
func MirrorServedBytes(t testing.TB, m *mirror.Metrics, model, version string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	want := fmt.Sprintf(`llmgw_mirror_served_bytes_total{model=%q,version=%q} `, model, version)
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	return 0
}
