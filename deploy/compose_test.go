package deploy

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/sirupsen/logrus"
	"sigs.k8s.io/yaml"
)

// learnedAtStart are the .env values the operator reads from a service's
// first start (deploy/README.md), so they cannot be required to start.
var learnedAtStart = map[string]bool{"BOOTSTRAP_ID": true, "MIRROR_AUTHORITY_PUBLIC_KEY": true}

// composeEnv fills the variables compose.yaml requires (env.example
// lists them), as an operator's .env does before the first start.
func composeEnv(t *testing.T) []string {
	t.Helper()
	var env []string
	for _, line := range strings.Split(readFile(t, "env.example"), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(strings.TrimSpace(line), "#") || learnedAtStart[name] {
			continue
		}
		if value == "" {
			value = "test-" + strings.ToLower(name)
		}
		env = append(env, name+"="+value)
	}
	return env
}

func loadCompose(t *testing.T, env []string) (*types.Project, error) {
	t.Helper()
	wd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(wd, "compose.yaml")},
		cli.WithWorkingDirectory(wd), cli.WithEnv(env), cli.WithProfiles([]string{"*"}))
	if err != nil {
		t.Fatal(err)
	}
	return opts.LoadProject(context.Background())
}

// TestComposeFile loads compose.yaml as docker compose does (compose-go:
// the compose specification's schema, interpolation, profiles, anchors)
// and checks every overworld service against the binary's flags.
func TestComposeFile(t *testing.T) {
	// Before the first start, without the values learnt from it, compose
	// must load (to start the bootstrap node that prints its ID).
	if _, err := loadCompose(t, composeEnv(t)); err != nil {
		t.Fatalf("compose.yaml before the first start: %v", err)
	}
	p, err := loadCompose(t, append(composeEnv(t), "BOOTSTRAP_ID=12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
		"MIRROR_AUTHORITY_PUBLIC_KEY=l1L4tJKR0J7jv07CwD6OMryOYzBKiwzTWTH9tPTklXA="))
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var overworld int
	for _, name := range slices.Sorted(mapKeys(p.Services)) {
		s := p.Services[name]
		if s.Image != "overworld:dev" {
			if s.Image == "" || !strings.Contains(s.Image, ":") {
				t.Errorf("service %s: image %q has no pinned tag", name, s.Image)
			}
			continue
		}
		overworld++
		if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("service %s: not built from deploy/Dockerfile", name)
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			if v != nil {
				env[k] = *v
			}
		}
		checkInvocation(t, invocation{where: "compose.yaml service " + name, args: s.Command, env: env})
	}
	if overworld < 8 {
		t.Errorf("only %d overworld services in compose.yaml", overworld)
	}
	for _, want := range []string{"bootstrap", "postgres", "accounts", "master", "peer-1", "peer-3", "bot-1", "mirror-authority", "mirror", "prometheus", "grafana"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("compose.yaml has no service %s", want)
		}
	}
	if s := p.Services["mirror"]; s.NetworkMode != "host" {
		t.Errorf("mirror: network_mode %q, want host (CRIMP multicasts on the LAN)", s.NetworkMode)
	}
	checkPrometheusTargets(t, p)
}

// TestComposeRequiresSecrets makes sure compose refuses to start without
// the secrets instead of running with empty tokens.
func TestComposeRequiresSecrets(t *testing.T) {
	// compose-go warns on the standard logger about each unset variable.
	logrus.SetOutput(io.Discard)
	t.Cleanup(func() { logrus.SetOutput(os.Stderr) })
	for _, missing := range []string{"POSTGRES_PASSWORD", "ADMIN_TOKEN", "OPERATOR_TOKEN", "PEER_PASSWORD", "GRAFANA_PASSWORD"} {
		var env []string
		for _, e := range composeEnv(t) {
			if !strings.HasPrefix(e, missing+"=") {
				env = append(env, e)
			}
		}
		if _, err := loadCompose(t, env); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("compose.yaml without %s: %v, want an error naming it", missing, err)
		}
	}
}

// checkPrometheusTargets checks that prometheus.yml scrapes each compose
// service on the address it serves its metrics on.
func checkPrometheusTargets(t *testing.T, p *types.Project) {
	t.Helper()
	var cfg struct {
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
			DNSSDConfigs []struct {
				Names []string `json:"names"`
				Port  int      `json:"port"`
			} `json:"dns_sd_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "prometheus.yml")), &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	scraped := map[string]bool{}
	check := func(job, host, port string) {
		name := host
		if host == "host.docker.internal" { // the host-network mirrors
			for _, n := range []string{"mirror-authority", "mirror"} {
				if serves(p.Services[n], port) {
					name = n
				}
			}
		}
		s, ok := p.Services[name]
		if !ok {
			t.Errorf("prometheus.yml job %s: %s is no compose service", job, host)
			return
		}
		if !serves(s, port) {
			t.Errorf("prometheus.yml job %s: %s serves no metrics on port %s (command %q)", job, name, port, s.Command)
		}
		scraped[name] = true
	}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("prometheus.yml job %s: target %q: %v", sc.JobName, target, err)
					continue
				}
				check(sc.JobName, host, port)
			}
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				check(sc.JobName, n, strconv.Itoa(d.Port))
			}
		}
	}
	for name, s := range p.Services {
		if s.Image == "overworld:dev" && !scraped[name] {
			t.Errorf("prometheus.yml does not scrape the overworld service %s", name)
		}
	}
}

// serves reports whether an overworld service's command serves metrics on
// port: its -metrics address, or -listen for the services that serve
// /metrics beside their API.
func serves(s types.ServiceConfig, port string) bool {
	for i, a := range s.Command {
		if (a == "-metrics" || a == "-listen") && i+1 < len(s.Command) {
			if _, p, err := net.SplitHostPort(s.Command[i+1]); err == nil && p == port {
				return true
			}
		}
	}
	return false
}
