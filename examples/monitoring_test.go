package examples

import (
	"encoding/json"
	"github.com/prometheus/prometheus/promql/parser"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/metrics"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/spec"
)

const monitoringDir = "deploy/monitoring/"

// budgetGauge is exported by the tenancy package, not by runtime/metrics;
// the alerts and the dashboard may use it.
const budgetGauge = "llmgw_budget_remaining_ratio"

type nopConn struct{}

func (nopConn) Send(*agentv1.ControlMessage) error { return nil }

// exportedNames returns every metric name the control plane exports, with
// a fleet and traffic that make every series appear (a GPU that reports
// every reading, a failed replica, a served stream).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := metrics.New()
	obs, err := metrics.NewObserver(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := fleet.New()
	f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{Gpus: []*agentv1.GPU{{
		Index: 0, Class: "h100-80g", MemoryMib: 81559, UtilizationPct: proto.Float64(1),
		TemperatureC: proto.Float64(40), EccErrors: proto.Uint64(0), NvlinkPeers: []int32{1}, MemoryUsedMib: proto.Uint64(1),
	}}}}, "a", nil, true, nopConn{})
	f.AddReplica(&fleet.Replica{ID: "r1", Model: "qwen", Profile: spec.Profile{Nodes: 1}, Shards: []*fleet.Shard{{ID: "r1-0", Node: "a", Sent: true}}})
	f.ApplyShardStatus("a", &agentv1.ShardStatus{ShardId: "r1-0", ReplicaId: "r1", State: agentv1.ShardState_SHARD_STATE_FAILED})
	if err := reg.Register(metrics.NewFleetCollector(metrics.FleetOptions{
		Fleet: f, Models: func() []metrics.CatalogModel { return []metrics.CatalogModel{{Name: "qwen", MinReplicas: 1}} },
	})); err != nil {
		t.Fatal(err)
	}
	obs.Observe(request.Record{Principal: request.Principal{Project: "p"}, Model: "qwen", ReplicaID: "r1", Status: 200,
		PromptTokens: 1, CompletionTokens: 1, Latency: time.Second, TTFT: time.Millisecond, Stream: true})
	mfs, err := reg.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{budgetGauge: true}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	return names
}

var metricName = regexp.MustCompile(`\bllmgw_[a-z0-9_]+`)

// checkNames fails for every llmgw_ metric name in expr the server does
// not export, and returns how many names expr used.
func checkNames(t *testing.T, where, expr string, exported map[string]bool) int {
	t.Helper()
	used := metricName.FindAllString(expr, -1)
	for _, n := range used {
		if !exported[n] {
			t.Errorf("%s uses %s, which the control plane does not export", where, n)
		}
	}
	return len(used)
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestMonitoringAlerts(t *testing.T) {
	exported := exportedNames(t)
	b, err := os.ReadFile(monitoringDir + "alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	promql := parser.NewParser(parser.Options{})
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			where := "alerts.yml " + r.Alert
			alerts = append(alerts, r.Alert)
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("alerts.yml group %s: a rule without alert or expr", g.Name)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q", where, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", where)
			}
			// Prometheus's own parser, as the rule loader runs it: an alert
			// expression must parse and be an instant vector.
			expr, err := promql.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %q does not parse as PromQL: %v", where, r.Expr, err)
				continue
			}
			if expr.Type() != parser.ValueTypeVector {
				t.Errorf("%s: %q is a %s, an alert needs an instant vector", where, r.Expr, expr.Type())
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" && strings.HasPrefix(vs.Name, "llmgw_") && !exported[vs.Name] {
					t.Errorf("%s: %s is not a metric llmgw exports", where, vs.Name)
				}
				return nil
			})
			checkNames(t, where, r.Expr, exported)
		}
	}
	// The alerts the operator guide promises.
	for _, want := range []string{"LlmgwNodeLost", "LlmgwReplicaFailing", "LlmgwReplicaRestartLoop", "LlmgwBudgetNearlyExhausted",
		"LlmgwGPUECCErrors", "LlmgwModelNoReadyReplica", "LlmgwHigh5xxRate"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yml has no %s", want)
		}
	}
}

func TestMonitoringDashboard(t *testing.T) {
	exported := exportedNames(t)
	b, err := os.ReadFile(monitoringDir + "grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("grafana-dashboard.json: uid %q, %d panels", dash.UID, len(dash.Panels))
	}
	ids := map[int]bool{}
	used := 0
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			used += checkNames(t, "dashboard panel "+p.Title, q.Expr, exported)
		}
	}
	for _, v := range dash.Templating.List {
		checkNames(t, "dashboard variable", v.Definition, exported)
	}
	if used == 0 {
		t.Fatal("the dashboard queries no llmgw metric")
	}
}

func TestMonitoringPrometheusConfig(t *testing.T) {
	b, err := os.ReadFile(monitoringDir + "prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	for _, f := range cfg.RuleFiles {
		if _, err := os.Stat(monitoringDir + f); err != nil {
			t.Errorf("prometheus.yml rule_files: %v", err)
		}
	}
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("prometheus.yml: %d scrape configs, want the one control-plane job", len(cfg.ScrapeConfigs))
	}
	sc := cfg.ScrapeConfigs[0]
	// The alerts select the job by name.
	if sc.JobName != "llmgw" || sc.MetricsPath != "/metrics" || len(sc.StaticConfigs) == 0 {
		t.Fatalf("prometheus.yml scrape config = %+v", sc)
	}
	_, port, _ := strings.Cut(config.Default().MetricsListen, ":")
	for _, target := range sc.StaticConfigs[0].Targets {
		if !strings.HasSuffix(target, ":"+port) {
			t.Errorf("prometheus.yml target %s is not on metrics_listen's default port %s", target, port)
		}
	}
}

// TestMonitoringAlertsParser: the parser the alerts go through refuses
// expressions that bracket counting let through, and a range vector where
// an alert needs an instant vector.
func TestMonitoringAlertsParser(t *testing.T) {
	promql := parser.NewParser(parser.Options{})
	for _, bad := range []string{
		`sum(rate(llmgw_requests_total[5m])) by`,
		`llmgw_nodes{state="lost"} >`,
		`rate(llmgw_requests_total[5x])`,
	} {
		if _, err := promql.ParseExpr(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	e, err := promql.ParseExpr(`llmgw_requests_total[5m]`)
	if err != nil || e.Type() == parser.ValueTypeVector {
		t.Errorf("a range vector parsed as %v, %v", e, err)
	}
}
