package deploy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// envOnly are OVERWORLD_* variables the binary reads that are no flag.
var envOnly = map[string]bool{
	"OVERWORLD_PASSWORD": true, // readPassword: the account password
}

// flagMethods are the flag.FlagSet methods that define a flag, and the
// position of the flag's name among their arguments.
var flagMethods = map[string]int{
	"String": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Bool": 0, "Duration": 0, "Float64": 0, "Func": 0, "BoolFunc": 0,
	"StringVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1, "BoolVar": 1, "DurationVar": 1, "Float64Var": 1,
	"Var": 1, "TextVar": 1,
}

// subcommandFlags reads cmd/overworld's sources and returns, per
// subcommand, the flags its run function defines: directly, or in the
// package's functions it calls (addWorldFlags, addAccountFlags, ...).
var subcommandFlags = sync.OnceValues(func() (map[string]map[string]bool, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("../cmd/overworld/*.go")
	if err != nil {
		return nil, err
	}
	funcs := map[string]*ast.FuncDecl{}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				funcs[fd.Name.Name] = fd
			}
		}
	}
	var collect func(n ast.Node, into map[string]bool, seen map[string]bool)
	collect = func(n ast.Node, into map[string]bool, seen map[string]bool) {
		ast.Inspect(n, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch fun := call.Fun.(type) {
			case *ast.SelectorExpr:
				if i, ok := flagMethods[fun.Sel.Name]; ok && len(call.Args) > i {
					if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if name, err := strconv.Unquote(lit.Value); err == nil {
							into[name] = true
						}
					}
				}
			case *ast.Ident:
				if fd := funcs[fun.Name]; fd != nil && !seen[fun.Name] {
					seen[fun.Name] = true
					collect(fd.Body, into, seen)
				}
			}
			return true
		})
	}
	out := map[string]map[string]bool{}
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if id, ok := lit.Type.(*ast.Ident); !ok || id.Name != "command" {
				return true
			}
			var name string
			var run ast.Node
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch key := kv.Key.(*ast.Ident); {
				case key == nil:
				case key.Name == "name":
					if bl, ok := kv.Value.(*ast.BasicLit); ok {
						name, _ = strconv.Unquote(bl.Value)
					}
				case key.Name == "run":
					run = kv.Value
				}
			}
			if name != "" && run != nil {
				flags := map[string]bool{}
				collect(run, flags, map[string]bool{})
				out[name] = flags
			}
			return true
		})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no subcommands found in cmd/overworld")
	}
	return out, nil
})

// invocation is one run of the overworld binary a manifest asks for.
type invocation struct {
	where string            // file and container, for messages
	args  []string          // subcommand and flags
	env   map[string]string // environment (values may be "" when they come from elsewhere)
}

// checkInvocation checks that the subcommand exists and knows every flag
// on the command line and every OVERWORLD_* variable in the environment,
// and that every $(VAR) on the command line is set in the environment.
func checkInvocation(t *testing.T, inv invocation) {
	t.Helper()
	all, err := subcommandFlags()
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.args) == 0 {
		t.Errorf("%s: no subcommand", inv.where)
		return
	}
	sub := inv.args[0]
	flags, ok := all[sub]
	if !ok {
		t.Errorf("%s: overworld has no subcommand %q", inv.where, sub)
		return
	}
	for _, a := range inv.args[1:] {
		if !strings.HasPrefix(a, "-") {
			continue // a flag's value
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("%s: overworld %s has no flag -%s", inv.where, sub, name)
		}
	}
	for name := range inv.env {
		if !strings.HasPrefix(name, "OVERWORLD_") || envOnly[name] {
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "OVERWORLD_"), "_", "-"))
		if !flags[flag] {
			t.Errorf("%s: %s sets no flag of overworld %s (it has no -%s)", inv.where, name, sub, flag)
		}
	}
	for _, a := range inv.args {
		for _, m := range k8sVarRef.FindAllStringSubmatch(a, -1) {
			if _, ok := inv.env[m[1]]; !ok {
				t.Errorf("%s: argument %q uses $(%s), which the container does not set", inv.where, a, m[1])
			}
		}
	}
}

// k8sVarRef is Kubernetes' $(VAR) expansion in a container's arguments.
var k8sVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func TestSubcommandFlagsFound(t *testing.T) {
	all, err := subcommandFlags()
	if err != nil {
		t.Fatal(err)
	}
	// The catalog itself must see what help shows, or every check built
	// on it would pass vacuously.
	for sub, want := range map[string][]string{
		"bootstrap": {"key-file", "listen-port", "peers", "metrics"},
		"peer":      {"bootstrap", "world", "world-size", "seed", "account", "user", "password-file", "register", "dht", "metrics"},
		"play":      {"bot", "http", "bootstrap", "account", "user"},
		"accounts":  {"listen", "db", "data-dir", "admin-token-file"},
		"master":    {"listen", "db", "operator-token-file", "operator-token"},
		"mirror":    {"authority", "authority-key", "authority-public-key", "crimp", "interface", "multicast", "listen", "state-listen", "state-advertise", "account"},
	} {
		for _, f := range want {
			if !all[sub][f] {
				t.Errorf("flag catalog: overworld %s -%s not found (catalog: %v)", sub, f, slices.Sorted(mapKeys(all[sub])))
			}
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestKubernetesInvocations checks every overworld container of the
// manifests against the binary's subcommands and flags, and every
// ConfigMap, Secret and Service a container depends on: defined in the
// manifests, or one the operator creates by deploy/README.md.
func TestKubernetesInvocations(t *testing.T) {
	objs := loadObjects(t)
	configMaps := map[string]map[string]string{}
	services := map[string][]int{}
	for _, o := range objs {
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		case "Service":
			for _, p := range o.Spec.Ports {
				services[o.Metadata.Name] = append(services[o.Metadata.Name], p.Port)
			}
		}
	}
	readme := readFile(t, "README.md")
	// operatorMade is what the operator creates by README.md: the test
	// checks the README says how.
	operatorMade := func(kind, name string) {
		t.Helper()
		if !strings.Contains(readme, name) {
			t.Errorf("%s %s is used by the manifests but neither defined there nor explained in deploy/README.md", kind, name)
		}
	}
	var checked int
	for _, o := range objs {
		ps := o.Spec.Template.Spec
		for _, vol := range ps.Volumes {
			if vol.Secret != nil {
				operatorMade("Secret", vol.Secret.SecretName)
			}
		}
		for _, c := range slices.Concat(ps.InitContainers, ps.Containers) {
			where := fmt.Sprintf("%s %s/%s", o.File, o.Metadata.Name, c.Name)
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					if data, ok := configMaps[r.Name]; ok {
						if _, ok := data[r.Key]; !ok {
							t.Errorf("%s: ConfigMap %s has no key %s", where, r.Name, r.Key)
						}
					} else {
						operatorMade("ConfigMap", r.Name)
					}
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					operatorMade("Secret", r.Name)
				}
			}
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef == nil {
					continue
				}
				data, ok := configMaps[ef.ConfigMapRef.Name]
				if !ok {
					t.Errorf("%s: envFrom ConfigMap %s is not in the manifests", where, ef.ConfigMapRef.Name)
				}
				for k, v := range data {
					env[k] = v
				}
			}
			for _, a := range c.Args {
				for _, m := range serviceURL.FindAllStringSubmatch(a, -1) {
					port, _ := strconv.Atoi(m[2])
					if !slices.Contains(services[m[1]], port) {
						t.Errorf("%s: %q names %s:%d, which no Service of the manifests serves", where, a, m[1], port)
					}
				}
			}
			if c.Image != "overworld" {
				continue
			}
			if len(c.Command) > 0 {
				t.Errorf("%s: overrides the image's entrypoint", where)
			}
			checkInvocation(t, invocation{where: where, args: c.Args, env: env})
			checked++
			// CRIMP multicasts on the machines' LAN; a pod in the host's
			// network still needs the cluster's DNS for the account server.
			if len(c.Args) > 0 && c.Args[0] == "mirror" && !ps.HostNetwork {
				t.Errorf("%s: a mirror outside the host's network cannot multicast on the LAN", where)
			}
			if ps.HostNetwork && ps.DNSPolicy != "ClusterFirstWithHostNet" {
				t.Errorf("%s: hostNetwork without dnsPolicy ClusterFirstWithHostNet cannot resolve the cluster's Services", where)
			}
			if i := slices.Index(c.Args, "-user"); i >= 0 && i+1 < len(c.Args) && c.Args[i+1] == "$(POD_NAME)" {
				if n := longestPodName(o); n > 32 {
					t.Errorf("%s: logs in as its pod name, which can be %d characters; account names have at most 32", where, n)
				}
			}
		}
	}
	if checked < 5 {
		t.Errorf("only %d overworld containers checked", checked)
	}
}

// serviceURL matches an in-cluster address host:port in a URL.
var serviceURL = regexp.MustCompile(`(?:://|@)(overworld-[a-z0-9-]+):([0-9]+)`)

// longestPodName is the longest name a pod of the workload gets:
// StatefulSets add "-<ordinal>" (assumed below 1000), Deployments
// "-<template hash, up to 10>-<5 random>".
func longestPodName(o object) int {
	switch o.Kind {
	case "StatefulSet":
		return len(o.Metadata.Name) + 4
	case "Deployment":
		return len(o.Metadata.Name) + 1 + 10 + 1 + 5
	}
	return 253
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
