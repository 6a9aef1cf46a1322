package deploy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/overworld-p2p/overworld/bootstrap"
	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/master"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror"
)

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(readFile(t, filepath.Join("grafana", "overworld.json"))))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana/overworld.json: %v", err)
	}
	return d
}

// TestDashboardShape checks what Grafana needs to load the dashboard and
// show every panel: unique IDs, a data source from the variable, a query
// per target, panels on the 24-column grid.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard without uid or title")
	}
	if len(d.Templating.List) != 1 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Errorf("want one Prometheus data source variable, got %+v", d.Templating.List)
	}
	ids := map[int]bool{}
	var queries int
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: duplicate id %d", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: off the grid: %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %d %q: needs a title and the ${datasource} Prometheus data source", p.ID, p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || refs[tg.RefID] || tg.RefID == "" {
				t.Errorf("panel %q: empty query or duplicate refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			queries++
		}
	}
	if queries < 20 {
		t.Errorf("only %d queries", queries)
	}
}

// promQLNonMetrics are the PromQL words that are not metric names.
var promQLNonMetrics = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGroupings = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
)

// metricNames returns the metric names a PromQL expression selects: its
// identifiers, less function calls, keywords, label matchers, groupings,
// ranges and strings.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGroupings.ReplaceAllString(s, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatch(s, -1) {
		name := m[0]
		if m[1] != "" || promQLNonMetrics[name] { // a function call or a keyword
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le, op) (rate(overworld_x_bucket{a="b{c}"}[$__rate_interval]))) / on (instance) group_left go_goroutines or vector(0)`)
	if want := []string{"overworld_x_bucket", "go_goroutines"}; !slices.Equal(got, want) {
		t.Fatalf("metricNames = %q, want %q", got, want)
	}
}

// TestDashboardMetricsExist checks that every metric the dashboard queries
// is registered by a service that exports it: each service's registry is
// built here the way its subcommand builds it (the same constructors and
// registries), and the name is looked up in it.
func TestDashboardMetricsExist(t *testing.T) {
	regs := serviceRegistries(t)
	used := map[string][]string{} // metric -> panels
	for _, p := range loadDashboard(t).Panels {
		for _, tg := range p.Targets {
			for _, name := range metricNames(tg.Expr) {
				used[name] = append(used[name], p.Title)
			}
		}
	}
	services := slices.Sorted(mapKeys(regs))
	for _, name := range slices.Sorted(mapKeys(used)) {
		var by []string
		for _, svc := range services {
			if registered(regs[svc], name) {
				by = append(by, svc)
			}
		}
		if len(by) == 0 {
			t.Errorf("metric %s (panels %q) is registered by no service", name, used[name])
			continue
		}
		t.Logf("%s: %s", name, strings.Join(by, ", "))
	}
	// The lookup itself: a name nobody registers is not found, a vector
	// with no series yet is.
	if registered(regs["accounts"], "overworld_accounts_no_such_metric_total") || !registered(regs["accounts"], "overworld_accounts_logins_total") {
		t.Error("registered() does not tell registered metrics from others")
	}
	if len(used) < 30 {
		t.Errorf("the dashboard queries only %d metrics", len(used))
	}
}

// registered reports whether reg holds a metric family called name (or,
// for a histogram's _bucket, _sum and _count series, the histogram). It
// asks the registry itself: registering a probe of the same name with
// other labels fails exactly when the name is taken.
func registered(reg *prometheus.Registry, name string) bool {
	names := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			names = append(names, base)
		}
	}
	for _, n := range names {
		probe := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: "deploy test probe"}, []string{"deploy_test_probe"})
		err := reg.Register(probe)
		if err == nil {
			reg.Unregister(probe)
			continue
		}
		if strings.Contains(err.Error(), "same fully-qualified name") {
			return true
		}
	}
	return false
}

// processRegistry is what every subcommand's /metrics starts from
// (cmd/overworld newProcessRegistry).
func processRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serviceRegistries builds each service's metrics as its subcommand does,
// on 127.0.0.1 and in temporary directories, and returns the registries
// their /metrics would serve.
func serviceRegistries(t *testing.T) map[string]*prometheus.Registry {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	loopback := ma.StringCast("/ip4/127.0.0.1/tcp/0")
	regs := map[string]*prometheus.Registry{}

	// overworld bootstrap
	reg := processRegistry()
	b, err := bootstrap.Start(ctx, bootstrap.Config{
		KeyFile: filepath.Join(t.TempDir(), "bootstrap.key"), ListenAddrs: []ma.Multiaddr{loopback}, Logger: log, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	regs["bootstrap"] = reg

	// overworld peer: a node and the region services (startHeadless)
	reg = processRegistry()
	n := newNode(t, ctx, reg, log)
	rs, err := play.StartRegionServices(ctx, n, play.RegionServicesConfig{
		World: "default", Game: game.DefaultConfig(), PositionInterval: 150 * time.Millisecond, Logger: log, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	regs["peer"] = reg

	// overworld play -bot: a node, the player runtime and its page
	reg = processRegistry()
	n = newNode(t, ctx, reg, log)
	p, err := play.New(ctx, n, play.Config{Bot: true, Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if _, err := webui.NewServer(webui.PeerSession(p), webui.Options{Logger: log, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	regs["play"] = reg

	// overworld accounts
	reg = processRegistry()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	astore, err := accounts.OpenStore(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { astore.Close() })
	if _, err := accounts.New(accounts.Config{Key: key, Logger: log, Registry: reg}, astore); err != nil {
		t.Fatal(err)
	}
	regs["accounts"] = reg

	// overworld master
	reg = processRegistry()
	mstore, err := master.OpenStore(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mstore.Close() })
	if _, err := master.New(master.Config{OperatorTokens: []string{"deploy-test-token"}, Logger: log, Registry: reg}, mstore); err != nil {
		t.Fatal(err)
	}
	regs["master"] = reg

	// overworld mirror -authority: the server (its own, TSS and CRIMP
	// collectors), started alone on an in-memory CRIMP network.
	reg = processRegistry()
	_, authorityKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	g := game.DefaultConfig()
	cfg := mirror.Config{
		Game: g, Authority: true, AuthorityKey: authorityKey, DataDir: t.TempDir(), StateListen: "127.0.0.1:0",
		AccountKey: key.Public().(ed25519.PublicKey), Characters: &mirror.AccountServer{URL: "http://127.0.0.1:1", Key: key.Public().(ed25519.PublicKey), Game: g},
		CRIMP: crimp.DefaultConfig(), Transport: crimp.NewMemNetwork(crimp.WallClock{}, 1).Endpoint("local"),
		Logger: log, Registerer: reg,
	}
	m, err := mirror.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	regs["mirror"] = reg
	return regs
}

func newNode(t *testing.T, ctx context.Context, reg prometheus.Registerer, log *slog.Logger) *node.Node {
	t.Helper()
	n, err := node.New(ctx, node.WithDataDir(t.TempDir()), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		node.WithLogger(log), node.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}
