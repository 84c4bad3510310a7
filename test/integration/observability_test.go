package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// The Grafana dashboard and the Prometheus alert rules shipped in
// docs/observability (the test runs in test/integration).
var (
	dashboardFile = filepath.Join("..", "..", "docs", "observability", "underlay-dashboard.json")
	alertsFile    = filepath.Join("..", "..", "docs", "observability", "underlay-alerts.yml")
)

// TestDashboardAndAlertsQueryLiveMetrics: every underlay metric the
// Grafana dashboard (its panels' targets and its variables) and the alert
// rules query is one the real binary serves on /metrics, from its start or
// after a network and an endpoint cycle and one failed request; every
// label value they select with = (state="lost", verdict="problem", ...)
// has a series there; every underlay metric served is on the dashboard;
// and promtool parses both: the alert rules as they are, the dashboard's
// expressions as recording rules once Grafana's variables are replaced.
func TestDashboardAndAlertsQueryLiveMetrics(t *testing.T) {
	t.Parallel()
	itest.RequireRoot(t)
	dash := readDashboard(t)
	alerts := readAlertExprs(t)

	_, d := setup(t, itest.DaemonOptions{})
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.1.0/24"}})
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	d.RemoveEndpoint(netA, epA)
	// An endpoint on a network underlay does not know: answered 500,
	// outcome="error".
	if code, body, err := d.Post("/NetworkDriver.CreateEndpoint", network.CreateEndpointRequest{NetworkID: netB, EndpointID: epB,
		Interface: &network.EndpointInterface{Address: "198.18.2.10/24"}}); err != nil || code != http.StatusInternalServerError {
		t.Fatalf("CreateEndpoint on an unknown network: %d %s (%v), want 500", code, body, err)
	}
	code, body, err := d.Get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s (%v)", code, body, err)
	}
	live := parseExposition(t, string(body))

	queried := map[string][]string{} // metric name -> where it is queried
	for _, q := range append(dash.exprs, alerts...) {
		for _, name := range metricNameRE.FindAllString(q.expr, -1) {
			queried[name] = append(queried[name], q.where)
		}
		checkLabelValues(t, q, live)
	}
	if len(queried) < 10 {
		t.Fatalf("only %d underlay metric names found in the dashboard's and the rules' expressions: %v", len(queried), queried)
	}
	for name, where := range queried {
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if _, ok := live.types[name]; !ok && !(family != name && live.types[family] == "histogram") {
			t.Errorf("%s (queried by %s) is no metric family underlay serves on /metrics", name, strings.Join(where, ", "))
			continue
		}
		if !live.samples[name] {
			t.Errorf("%s (queried by %s) has no series in underlay's /metrics (a histogram's family is queried as _bucket, _sum or _count)", name, strings.Join(where, ", "))
		}
	}
	// The other way: every family underlay serves is on the dashboard.
	onDashboard := map[string]bool{}
	for _, q := range dash.exprs {
		for _, name := range metricNameRE.FindAllString(q.expr, -1) {
			onDashboard[name] = true
		}
	}
	for family, typ := range live.types {
		if !strings.HasPrefix(family, "underlay_") {
			continue
		}
		if !onDashboard[family] && !(typ == "histogram" && (onDashboard[family+"_bucket"] || onDashboard[family+"_count"] || onDashboard[family+"_sum"])) {
			t.Errorf("underlay serves %s (%s) but no panel of %s shows it", family, typ, dashboardFile)
		}
	}

	promtool := promtoolPath(t)
	runPromtool(t, promtool, alertsFile)
	// The dashboard's expressions, as recording rules.
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: underlay-dashboard\n    rules:\n")
	written := 0
	for i, q := range dash.exprs {
		expr, err := grafanaToPromQL(q.expr, dash.vars)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		written++
		quoted, err := json.Marshal(expr) // a JSON string is a YAML double-quoted scalar
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rules, "      - record: dashboard_expr_%d\n        expr: %s\n", i, quoted)
	}
	tmp := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(tmp, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runPromtool(t, promtool, tmp); !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", written)) {
		t.Errorf("promtool check rules on the dashboard's %d expressions:\n%s\n%s", written, out, rules.String())
	}
}

// metricNameRE finds underlay's metric names in an expression.
var metricNameRE = regexp.MustCompile(`underlay_[a-z0-9_]+`)

// promExpr is one PromQL expression of the dashboard or the rules.
type promExpr struct{ where, expr string }

// grafanaDashboard is what the test reads of the dashboard's JSON.
type grafanaDashboard struct {
	exprs []promExpr
	vars  map[string]bool // its templating variables' names
}

type grafanaPanel struct {
	ID         *int            `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		RefID      string          `json:"refId"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// readDashboard reads the dashboard and checks its form: importable in
// one step (a DS_PROMETHEUS input, a datasource variable), unique panel
// IDs, a data source on every panel and target, and an expression on every
// target.
func readDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Inputs []struct {
			Name, Type, PluginID string
		} `json:"__inputs"`
		SchemaVersion int            `json:"schemaVersion"`
		UID           string         `json:"uid"`
		Title         string         `json:"title"`
		Panels        []grafanaPanel `json:"panels"`
		Templating    struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      json.RawMessage `json:"query"`
				Datasource json.RawMessage `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	if len(doc.Inputs) != 1 || doc.Inputs[0].Name != "DS_PROMETHEUS" || doc.Inputs[0].Type != "datasource" || doc.Inputs[0].PluginID != "prometheus" {
		t.Errorf("%s __inputs = %+v, want one prometheus datasource input DS_PROMETHEUS", dashboardFile, doc.Inputs)
	}
	if !strings.Contains(string(raw), "${DS_PROMETHEUS}") {
		t.Errorf("%s never uses ${DS_PROMETHEUS}: the import would not ask for a data source", dashboardFile)
	}
	if doc.SchemaVersion < 36 || doc.UID == "" || doc.Title == "" {
		t.Errorf("%s: schemaVersion %d, uid %q, title %q", dashboardFile, doc.SchemaVersion, doc.UID, doc.Title)
	}
	d := grafanaDashboard{vars: map[string]bool{}}
	for _, v := range doc.Templating.List {
		d.vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		if !usesDatasource(v.Datasource) {
			t.Errorf("variable %s has no data source (%s)", v.Name, v.Datasource)
		}
		var q string
		var obj struct{ Query string }
		if json.Unmarshal(v.Query, &q) != nil {
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
			q = obj.Query
		}
		expr, ok := strings.CutPrefix(q, "label_values(")
		if i := strings.LastIndexByte(expr, ','); ok && i > 0 && strings.HasSuffix(expr, ")") {
			expr = expr[:i] // label_values(EXPR, label)
		} else {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q)
			continue
		}
		d.exprs = append(d.exprs, promExpr{"variable " + v.Name, strings.TrimSpace(expr)})
	}
	for _, name := range []string{"datasource", "instance"} {
		if !d.vars[name] {
			t.Errorf("%s has no %s variable", dashboardFile, name)
		}
	}
	ids := map[int]string{}
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			switch {
			case p.ID == nil:
				t.Errorf("panel %q has no id", p.Title)
			case ids[*p.ID] != "":
				t.Errorf("panels %q and %q have the same id %d", ids[*p.ID], p.Title, *p.ID)
			default:
				ids[*p.ID] = p.Title
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if !usesDatasource(p.Datasource) {
				t.Errorf("panel %q has no data source (%s)", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no target", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" || !usesDatasource(tg.Datasource) {
					t.Errorf("panel %q target %s: expression %q, data source %s", p.Title, tg.RefID, tg.Expr, tg.Datasource)
					continue
				}
				d.exprs = append(d.exprs, promExpr{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	walk(doc.Panels)
	if len(ids) < 10 {
		t.Errorf("%s has %d panels", dashboardFile, len(ids))
	}
	return d
}

// usesDatasource: a Prometheus data source chosen by the dashboard's
// variable or at import.
func usesDatasource(raw json.RawMessage) bool {
	var ds struct{ Type, UID string }
	return json.Unmarshal(raw, &ds) == nil && ds.Type == "prometheus" && (ds.UID == "${datasource}" || ds.UID == "$datasource" || ds.UID == "${DS_PROMETHEUS}")
}

// readAlertExprs returns the rules' expressions. The module has no YAML
// parser: each rule's expr is one line (promtool checks the rest), and
// there must be one per alert.
func readAlertExprs(t *testing.T) []promExpr {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []promExpr
	alert, alerts := "", 0
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(line, "- alert:"); ok {
			alert = strings.TrimSpace(name)
			alerts++
		}
		if expr, ok := strings.CutPrefix(line, "expr:"); ok {
			expr = strings.TrimSpace(expr)
			if expr == "" || expr[0] == '|' || expr[0] == '>' {
				t.Fatalf("%s:%d: write the expression of %s on its line (the test reads it without a YAML parser)", alertsFile, i+1, alert)
			}
			out = append(out, promExpr{"alert " + alert, expr})
		}
	}
	if alerts == 0 || len(out) != alerts {
		t.Fatalf("%s: %d alerts, %d one-line expressions", alertsFile, alerts, len(out))
	}
	return out
}

// exposition is a /metrics text: the families' types and the names of its
// samples.
type exposition struct {
	types   map[string]string
	samples map[string]bool
	series  map[string]float64
}

func parseExposition(t *testing.T, text string) exposition {
	t.Helper()
	e := exposition{types: map[string]string{}, samples: map[string]bool{}}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			e.types[f[2]] = f[3]
		} else if i := strings.IndexAny(line, "{ "); i > 0 && line[0] != '#' {
			e.samples[line[:i]] = true
		}
	}
	var err error
	if e.series, err = itest.Metrics(text); err != nil {
		t.Fatal(err)
	}
	return e
}

var (
	selectorRE = regexp.MustCompile(`(underlay_[a-z0-9_]+)\s*\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"([^"]*)"`)
)

// checkLabelValues: every label=value an expression selects on an
// underlay metric has a series in the live exposition (job and instance
// are Prometheus's target labels, not the daemon's).
func checkLabelValues(t *testing.T, q promExpr, live exposition) {
	t.Helper()
	for _, sel := range selectorRE.FindAllStringSubmatch(q.expr, -1) {
		name := sel[1]
		for _, m := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
			if m[2] != "=" || m[1] == "job" || m[1] == "instance" {
				continue
			}
			want := fmt.Sprintf(`%s="%s"`, m[1], m[3])
			found := false
			for series := range live.series {
				if rest, ok := strings.CutPrefix(series, name+"{"); ok && slices.Contains(strings.Split(strings.TrimSuffix(rest, "}"), ","), want) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s selects %s{%s}: no such series in underlay's /metrics", q.where, name, want)
			}
		}
	}
}

// grafanaVarRE finds Grafana's variables: $name, ${name}, ${name:format}.
var grafanaVarRE = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)`)

// grafanaToPromQL replaces Grafana's variables in expr by values PromQL
// parses: the built-in intervals by durations, the dashboard's variables
// by a label value.
func grafanaToPromQL(expr string, vars map[string]bool) (string, error) {
	builtin := map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__range_s": "3600", "__interval_ms": "60000"}
	var bad []string
	out := grafanaVarRE.ReplaceAllStringFunc(expr, func(s string) string {
		m := grafanaVarRE.FindStringSubmatch(s)
		name := m[1] + m[2]
		if v, ok := builtin[name]; ok {
			return v
		}
		if vars[name] {
			return "underlay"
		}
		bad = append(bad, s)
		return s
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("expression %q uses %v: no variable of the dashboard's nor Grafana's", expr, bad)
	}
	return out, nil
}

// promtoolPath is $PROMTOOL, else promtool in PATH. Without either the
// test fails in CI and skips elsewhere.
func promtoolPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("PROMTOOL=%s: %v (make bin/tools/promtool fetches it)", p, err)
		}
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	const why = "no promtool: set PROMTOOL to its path (make bin/tools/promtool fetches it) or put it in PATH"
	if itest.InCI() {
		t.Fatal(why)
	}
	t.Skip("skipped the promtool checks (the live metrics were checked): " + why)
	return ""
}

// runPromtool runs promtool check rules on file and fails the test
// unless it succeeds; it returns promtool's output.
func runPromtool(t *testing.T, promtool, file string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Errorf("%s check rules %s: %v\n%s", promtool, file, err, out)
	}
	return string(out)
}
