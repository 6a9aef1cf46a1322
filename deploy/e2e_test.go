package deploy

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, as the stores use

	"github.com/overworld-p2p/overworld/node/await"
)

// TestKubernetesCommandLinesRun runs the command lines of the Kubernetes
// manifests as real processes on 127.0.0.1: a bootstrap node with a key
// made by bootstrapkeys (copied to a private file as the init container
// does), the account server, the master server, two headless peers and
// two bots, each with exactly the manifest's arguments and environment
// except for addresses and paths. With OVERWORLD_TEST_POSTGRES (CI's
// PostgreSQL) the account and master servers share a fresh database
// there through the manifests' -db URL (only host, port and database
// name changed); without, they use SQLite. It checks that every process
// gets ready, that peers and bots register their pod-named accounts, that
// they join the overlay through the bootstrap node and that regions get
// coordinated under leases, and that SIGTERM stops each cleanly.
//
// It builds the binary and runs seven processes (about 10 s with a warm
// build cache), so -short skips it.
func TestKubernetesCommandLinesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary and runs the manifests' command lines as processes")
	}
	tmp := t.TempDir()
	bin, keygen := buildBinaries(t)

	// The operator's steps: bootstrapkeys, then the Secrets.
	secretDir := filepath.Join(tmp, "secrets")
	if b, err := exec.Command(keygen, "-n", "1", "-dir", secretDir).CombinedOutput(); err != nil {
		t.Fatalf("bootstrapkeys: %v\n%s", err, b)
	}
	bootPort := freePort(t)
	addrs := strings.TrimSpace(readFile(t, filepath.Join(secretDir, "bootstrap-addrs")))
	addrs = strings.Replace(addrs, "/dns4/overworld-bootstrap-0.overworld-bootstrap/tcp/4001", "/ip4/127.0.0.1/tcp/"+strconv.Itoa(bootPort), 1)
	operator := map[string]string{ // ConfigMap or Secret name/key -> value
		"overworld-network/OVERWORLD_BOOTSTRAP": addrs,
		"overworld-postgres/password":           "e2e-postgres-password", // trust auth in CI ignores it
		"overworld-accounts/admin-token":        "e2e-admin-token-0123456789",
		"overworld-master/operator-tokens":      "e2e-operator-token-0123456789",
		"overworld-peers/password":              "e2e-peer-password",
		"overworld-bots/password":               "e2e-bot-password",
	}
	// The init container's copy of the pod's key.
	identity := filepath.Join(tmp, "identity")
	if err := os.MkdirAll(identity, 0o700); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(secretDir, "overworld-bootstrap-0.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(identity, "bootstrap.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}

	objs := loadObjects(t)
	configMaps := map[string]map[string]string{}
	for _, o := range objs {
		if o.Kind == "ConfigMap" {
			configMaps[o.Metadata.Name] = o.Data
		}
	}
	accountsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	masterAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	database := e2eDatabase(t)
	procs := []struct{ workload, pod string }{
		{"overworld-bootstrap", "overworld-bootstrap-0"},
		{"overworld-accounts", "overworld-accounts-0"},
		{"overworld-master", "overworld-master-7c9d5b8f4d-q2x7z"},
		{"overworld-peer", "overworld-peer-0"},
		{"overworld-peer", "overworld-peer-1"},
		{"overworld-bot", "overworld-bot-5d8c7f9b6d-x7k2p"},
		{"overworld-bot", "overworld-bot-6b4f8d9c5f-m4n8r"},
	}
	n := newNetwork(t, bin, tmp)
	// startPod runs the workload's overworld container as the pod would.
	startPod := func(workload, pod string, replace map[string]string) *process {
		t.Helper()
		c, ok := workloadContainer(objs, workload)
		if !ok {
			t.Fatalf("no workload %s in the manifests", workload)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			v := e.Value
			if vf := e.ValueFrom; vf != nil {
				switch {
				case vf.FieldRef != nil && vf.FieldRef.FieldPath == "metadata.name":
					v = pod
				case vf.FieldRef != nil && vf.FieldRef.FieldPath == "status.hostIP":
					v = "127.0.0.1"
				case vf.ConfigMapKeyRef != nil:
					if data, ok := configMaps[vf.ConfigMapKeyRef.Name]; ok {
						v = data[vf.ConfigMapKeyRef.Key]
					} else {
						v = operator[vf.ConfigMapKeyRef.Name+"/"+vf.ConfigMapKeyRef.Key]
					}
				case vf.SecretKeyRef != nil:
					v = operator[vf.SecretKeyRef.Name+"/"+vf.SecretKeyRef.Key]
				default:
					t.Fatalf("%s: env %s from an unknown source", workload, e.Name)
				}
			}
			env[e.Name] = v
		}
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				for k, v := range configMaps[ef.ConfigMapRef.Name] {
					env[k] = v
				}
			}
		}
		// The pod's Secret volume, mounted at /secrets.
		podDir := filepath.Join(tmp, pod)
		secrets := filepath.Join(podDir, "secrets")
		if err := os.MkdirAll(secrets, 0o700); err != nil {
			t.Fatal(err)
		}
		o, _ := workloadObject(objs, workload)
		for _, vol := range o.Spec.Template.Spec.Volumes {
			if vol.Secret == nil || vol.Secret.SecretName == "overworld-bootstrap-keys" {
				continue
			}
			for k, v := range operator {
				if name, key, _ := strings.Cut(k, "/"); name == vol.Secret.SecretName {
					if err := os.WriteFile(filepath.Join(secrets, key), []byte(v+"\n"), 0o400); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		p2pPort := bootPort
		if workload != "overworld-bootstrap" {
			p2pPort = freePort(t)
		}
		rep := map[string]string{
			"0.0.0.0:8640":                   accountsAddr,
			"0.0.0.0:8650":                   masterAddr,
			"0.0.0.0:9100":                   "127.0.0.1:" + strconv.Itoa(freePort(t)),
			"127.0.0.1:8080":                 "127.0.0.1:0", // a bot's page, on the pod's own loopback
			"http://overworld-accounts:8640": "http://" + accountsAddr,
			"/identity/":                     identity + "/",
			"/secrets/":                      secrets + "/",
			"/data/":                         filepath.Join(podDir, "data") + "/",
		}
		maps.Copy(rep, replace)
		args := localArgs(t, c.Args, env, database, rep, p2pPort, serviceURL)
		p := n.start(pod, args, env)
		if database != nil && slices.Contains(args, "-db") && !strings.Contains(p.out.String(), "store: postgres") {
			t.Errorf("%s does not say it uses PostgreSQL:\n%s", pod, p.tail())
		}
		return p
	}
	for _, pr := range procs {
		startPod(pr.workload, pr.pod, nil)
	}
	n.checkPlaying(4)

	// Mirrors: the authority with its key from the Secret, a mirror with
	// the public half from the ConfigMap, both multicasting on the
	// loopback interface as they would on the LAN.
	_, authKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(authKey) // what openssl genpkey -algorithm ed25519 writes
	if err != nil {
		t.Fatal(err)
	}
	operator["overworld-mirror-authority/authority.pem"] = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	operator["overworld-mirror-authority/OVERWORLD_AUTHORITY_PUBLIC_KEY"] = base64.StdEncoding.EncodeToString(authKey.Public().(ed25519.PublicKey))
	configMaps["overworld-mirror"] = map[string]string{
		"interface": "lo",
		"multicast": fmt.Sprintf("239.77.%d.%d:%d", os.Getpid()%200+1, time.Now().UnixNano()%200+1, freePort(t)),
	}
	statePort := "127.0.0.1:" + strconv.Itoa(freePort(t))
	authority := startPod("overworld-mirror-authority", "overworld-mirror-authority-5f7b9c8d6e-k3m9p", map[string]string{
		"0.0.0.0:8670":   "127.0.0.1:" + strconv.Itoa(freePort(t)),
		"0.0.0.0:8671":   statePort,
		"127.0.0.1:8671": statePort, // $(HOST_IP):8671
	})
	mirror := startPod("overworld-mirror", "overworld-mirror-x8k2j", map[string]string{
		"0.0.0.0:8670": "127.0.0.1:" + strconv.Itoa(freePort(t)),
	})
	for _, p := range []*process{authority, mirror} {
		waitFor(t, p, 60*time.Second, "checkpoints agreed with the other mirror", func() bool {
			_, body := httpGet(p.opsURL() + "/metrics")
			return metricSum(body, "mirror_checkpoints_agreed_total", "") >= 1
		})
	}
	n.stopAll()
}

// TestComposeCommandLinesRun does the same for compose.yaml, following
// deploy/README.md: start the bootstrap node, read its peer ID from its
// output into BOOTSTRAP_ID, then start the account and master servers,
// the three peers and the three bots with the commands and environment
// compose gives them; then the mirror profile the same way (the authority's printed public key into
// MIRROR_AUTHORITY_PUBLIC_KEY), multicasting on the loopback interface.
func TestComposeCommandLinesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary and runs the compose file's command lines as processes")
	}
	tmp := t.TempDir()
	bin, _ := buildBinaries(t)
	n := newNetwork(t, bin, tmp)
	accountsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	masterAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	bootPort := freePort(t)
	var bootstrapID, authorityKey string
	multicast := fmt.Sprintf("239.78.%d.%d:%d", os.Getpid()%200+1, time.Now().UnixNano()%200+1, freePort(t))
	statePort := "127.0.0.1:" + strconv.Itoa(freePort(t))
	start := func(name string) *process {
		t.Helper()
		env := append(composeEnv(t), "MIRROR_INTERFACE=lo")
		if bootstrapID != "" {
			env = append(env, "BOOTSTRAP_ID="+bootstrapID)
		}
		if authorityKey != "" {
			env = append(env, "MIRROR_AUTHORITY_PUBLIC_KEY="+authorityKey)
		}
		p, err := loadCompose(t, env)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("compose.yaml has no service %s", name)
		}
		senv := map[string]string{}
		for k, v := range s.Environment {
			if v != nil {
				senv[k] = strings.Replace(*v, "/dns4/bootstrap/tcp/4001", "/ip4/127.0.0.1/tcp/"+strconv.Itoa(bootPort), 1)
			}
		}
		if s.NetworkMode == "host" {
			senv["OVERWORLD_MULTICAST"] = multicast // not the default group other tests on this machine may use
		}
		p2pPort := bootPort
		if name != "bootstrap" {
			p2pPort = freePort(t)
		}
		dir := filepath.Join(tmp, name)
		args := localArgs(t, s.Command, senv, nil, map[string]string{
			"0.0.0.0:8640":          accountsAddr,
			"0.0.0.0:8650":          masterAddr,
			"0.0.0.0:9100":          "127.0.0.1:" + strconv.Itoa(freePort(t)),
			"0.0.0.0:8670":          "127.0.0.1:" + strconv.Itoa(freePort(t)),
			"0.0.0.0:8672":          "127.0.0.1:" + strconv.Itoa(freePort(t)),
			"127.0.0.1:8671":        statePort,
			"127.0.0.1:8080":        "127.0.0.1:0",
			"http://accounts:8640":  "http://" + accountsAddr,
			"http://127.0.0.1:8640": "http://" + accountsAddr, // the host-network mirrors
			"/data/":                filepath.Join(dir, "data") + "/",
		}, p2pPort, regexp.MustCompile(`://(accounts|master|bootstrap|postgres):`))
		return n.start(name, args, senv)
	}
	// logged waits for what `docker compose logs` shows the operator.
	logged := func(p *process, re string) string {
		t.Helper()
		m, err := p.out.MatchErr(60*time.Second, regexp.MustCompile(re))
		if err != nil {
			t.Fatalf("%s: %v:\n%s", p.name, err, p.tail())
		}
		return m[1]
	}
	bootstrapID = logged(start("bootstrap"), `bootstrap node (\S+) listening on`)
	for _, name := range []string{"accounts", "master", "peer-1", "peer-2", "peer-3", "bot-1", "bot-2", "bot-3"} {
		start(name)
	}
	n.checkPlaying(6)

	authority := start("mirror-authority")
	authorityKey = logged(authority, `authority public key[^:]*: (\S+)`)
	mirror := start("mirror")
	for _, p := range []*process{authority, mirror} {
		waitFor(t, p, 60*time.Second, "checkpoints agreed with the other mirror", func() bool {
			_, body := httpGet(p.opsURL() + "/metrics")
			return metricSum(body, "mirror_checkpoints_agreed_total", "") >= 1
		})
	}
	n.stopAll()
}

// e2eDatabase returns how the test rewrites the manifests' -db URL: into
// a fresh database on OVERWORLD_TEST_POSTGRES's server, dropped after the
// test, or nil (SQLite) without one.
func e2eDatabase(t *testing.T) func(string) string {
	t.Helper()
	admin := os.Getenv("OVERWORLD_TEST_POSTGRES")
	if admin == "" {
		t.Log("OVERWORLD_TEST_POSTGRES unset: the account and master servers use SQLite")
		return nil
	}
	server, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("OVERWORLD_TEST_POSTGRES: %v", err)
	}
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	name := fmt.Sprintf("overworld_deploy_e2e_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	t.Logf("the account and master servers share database %s", name)
	return func(manifestURL string) string {
		u, err := url.Parse(manifestURL)
		if err != nil {
			t.Fatalf("-db %q: %v", manifestURL, err)
		}
		u.Host, u.Path = server.Host, "/"+name
		return u.String()
	}
}

// buildBinaries builds overworld (or takes OVERWORLD_DEPLOY_BIN) and
// bootstrapkeys, once for all tests.
func buildBinaries(t *testing.T) (overworld, bootstrapkeys string) {
	t.Helper()
	bins, err := builtBinaries()
	if err != nil {
		t.Fatal(err)
	}
	return bins[0], bins[1]
}

var builtBinaries = sync.OnceValues(func() ([2]string, error) {
	dir, err := os.MkdirTemp("", "overworld-deploy-bin-")
	if err != nil {
		return [2]string{}, err
	}
	cleanupDirs = append(cleanupDirs, dir)
	bins := [2]string{filepath.Join(dir, "overworld"), filepath.Join(dir, "bootstrapkeys")}
	for i, pkg := range []string{"../cmd/overworld", "./bootstrapkeys"} {
		if i == 0 && os.Getenv("OVERWORLD_DEPLOY_BIN") != "" {
			// An overworld built elsewhere (another branch, a release),
			// to try the manifests against it.
			bins[0] = os.Getenv("OVERWORLD_DEPLOY_BIN")
			continue
		}
		if b, err := exec.Command("go", "build", "-o", bins[i], pkg).CombinedOutput(); err != nil {
			return bins, fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	return bins, nil
})

// network is the processes of one test, started in order: the bootstrap
// node first, then the account server, the master server, peers and bots.
type network struct {
	t       *testing.T
	bin     string
	dir     string
	running []*process
}

func newNetwork(t *testing.T, bin, dir string) *network {
	n := &network{t: t, bin: bin, dir: dir}
	t.Cleanup(func() {
		for _, p := range slices.Backward(n.running) {
			p.kill()
		}
	})
	return n
}

// start runs one process and waits for its /readyz (which is what the
// manifests' probes ask; the processes log no line when they get ready).
func (n *network) start(name string, args []string, env map[string]string) *process {
	n.t.Helper()
	p := startProcess(n.t, n.bin, args, env, n.dir)
	p.name = name
	n.running = append(n.running, p)
	waitFor(n.t, p, 90*time.Second, "ready", func() bool {
		status, _ := httpGet(p.opsURL() + "/readyz")
		return status == http.StatusOK
	})
	return p
}

// checkPlaying waits until the peers and bots (players) have registered
// their accounts, every one of them and the bootstrap node has joined the
// overlay, and one of them coordinates a region under a lease from the
// account server.
func (n *network) checkPlaying(players int) {
	n.t.Helper()
	metricsOf := func(p *process) string {
		_, body := httpGet(p.opsURL() + "/metrics")
		return body
	}
	bootstrap, accounts := n.running[0], n.running[1]
	// The account server logs each registration after counting it: wait
	// for the lines, then the count on /metrics must show them all.
	registered := regexp.MustCompile(fmt.Sprintf(`(?s)(?:msg="account registered".*){%d}`, players))
	if _, err := accounts.out.MatchErr(60*time.Second, registered); err != nil {
		n.t.Fatalf("%s: %v:\n%s", accounts.name, err, accounts.tail())
	}
	if got := metricSum(metricsOf(accounts), "overworld_accounts_registrations_total", `result="ok"`); got < float64(players) {
		n.t.Fatalf("%s logged %d registrations, its /metrics counts %v", accounts.name, players, got)
	}
	n.t.Logf("%s: %d accounts registered", accounts.name, players)
	for _, p := range append([]*process{bootstrap}, n.running[3:]...) {
		waitFor(n.t, p, 60*time.Second, "peers in its DHT routing table (joined the overlay)", func() bool {
			return metricSum(metricsOf(p), "overworld_node_dht_routing_table_peers", "") >= 1
		})
	}
	waitFor(n.t, bootstrap, 90*time.Second, "a region coordinated under a lease", func() bool {
		var held float64
		for _, p := range n.running[3:] {
			held += metricSum(metricsOf(p), "overworld_regions_held", `role="coordinator"`)
		}
		return held >= 1 && metricSum(metricsOf(accounts), "overworld_accounts_lease_operations_total", `result="ok"`) >= 1
	})
}

// stopAll sends SIGTERM to every process, last started first, and
// expects each to exit cleanly.
func (n *network) stopAll() {
	n.t.Helper()
	for _, p := range slices.Backward(n.running) {
		if err := p.stop(30 * time.Second); err != nil {
			n.t.Errorf("%s: %v\n%s", p.name, err, p.tail())
		}
	}
	n.running = nil
}

func workloadObject(objs []object, name string) (object, bool) {
	for _, o := range objs {
		if o.Metadata.Name == name && (o.Kind == "StatefulSet" || o.Kind == "Deployment" || o.Kind == "DaemonSet") {
			return o, true
		}
	}
	return object{}, false
}

func workloadContainer(objs []object, name string) (container, bool) {
	o, ok := workloadObject(objs, name)
	if !ok {
		return container{}, false
	}
	for _, c := range o.Spec.Template.Spec.Containers {
		if c.Image == "overworld" {
			return c, true
		}
	}
	return container{}, false
}

// localArgs turns a manifest's arguments into ones for this machine:
// $(VAR) expanded as Kubernetes does, cluster addresses and paths
// replaced, -listen-port as loopback multiaddrs on p2pPort, and -db
// given to database (nil: dropped, SQLite in -data-dir). It fails the
// test if anything of the cluster is left.
func localArgs(t *testing.T, in []string, env map[string]string, database func(string) string, replace map[string]string, p2pPort int, clusterURL *regexp.Regexp) []string {
	t.Helper()
	var out []string
	for i := 0; i < len(in); i++ {
		a := k8sVarRef.ReplaceAllStringFunc(in[i], func(ref string) string { return env[ref[2:len(ref)-1]] })
		switch a {
		case "-listen-port":
			i++
			out = append(out, "-listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d,/ip4/127.0.0.1/udp/%d/quic-v1", p2pPort, p2pPort))
			continue
		case "-db":
			i++
			if database == nil {
				continue
			}
			out = append(out, "-db", database(in[i]))
			continue
		}
		for from, to := range replace {
			if strings.HasPrefix(a, from) {
				a = to + strings.TrimPrefix(a, from)
			}
		}
		out = append(out, a)
	}
	for k, v := range env {
		if strings.Contains(v, "/dns4/") {
			t.Fatalf("env %s=%s still names cluster addresses", k, v)
		}
	}
	for _, a := range out {
		if strings.Contains(a, "0.0.0.0") || clusterURL.MatchString(a) {
			t.Fatalf("argument %q still names a cluster address (args %q)", a, out)
		}
	}
	return out
}

type process struct {
	name string
	args []string
	cmd  *exec.Cmd
	out  *await.Output // stdout and stderr: what the container's log would show
	done chan error
}

// startProcess runs bin with args and only env (HOME is home).
func startProcess(t *testing.T, bin string, args []string, env map[string]string, home string) *process {
	t.Helper()
	out := &await.Output{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Only the pod's environment, as in a container (plus HOME for Go).
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{args: args, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p
}

// opsURL is where the process serves /readyz: its -metrics address, or
// -listen for the account and master servers.
func (p *process) opsURL() string {
	for _, flag := range []string{"-metrics", "-listen"} {
		if i := slices.Index(p.args, flag); i >= 0 && i+1 < len(p.args) && !strings.HasPrefix(p.args[i+1], "/") {
			return "http://" + p.args[i+1]
		}
	}
	return ""
}

func (p *process) stop(timeout time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("exit after SIGTERM: %w", err)
		}
		return nil
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("still running %s after SIGTERM", timeout)
	}
}

func (p *process) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
	}
}

func (p *process) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

func (p *process) tail() string {
	lines := strings.Split(p.out.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-25):], "\n")
}

// waitFor waits until cond holds, failing if the process dies first or
// the bound passes. The states it waits for show only on a process's
// /readyz or /metrics, so cond checks them (await.Until's growing
// interval), and a process that exits ends the wait at once.
func waitFor(t *testing.T, p *process, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := await.UntilErr(d, p.name+": "+what, func() bool { return p.exited() || cond() }); err != nil {
		t.Fatalf("%v:\n%s", err, p.tail())
	}
	if p.exited() {
		t.Fatalf("%s exited while waiting for %s:\n%s", p.name, what, p.tail())
	}
	t.Logf("%s: %s", p.name, what)
}

// httpGet fetches url with a short timeout: its status (0 when it could
// not be fetched) and body.
func httpGet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(b)
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)`)

// metricSum adds the samples of name whose labels contain labelPart in
// a Prometheus text exposition.
func metricSum(exposition, name, labelPart string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != name || !strings.Contains(m[2], labelPart) {
			continue
		}
		if v, err := strconv.ParseFloat(m[3], 64); err == nil {
			sum += v
		}
	}
	return sum
}
