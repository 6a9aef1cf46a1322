// Command bootstrapkeys makes the identity keys of a Kubernetes fleet of
// bootstrap nodes (deploy/k8s/bootstrap.yaml) before it starts, so that
// the multiaddrs players and peers dial, which name each node's peer ID,
// are known up front:
//
//	go run ./deploy/bootstrapkeys -n 3 -dir deploy/k8s/secrets
//
// writes overworld-bootstrap-0.key … -2.key (the format `overworld
// bootstrap -key-file` reads; keys already there are kept, so running it
// again after scaling up adds only the new ones), writes the in-cluster
// multiaddr list to bootstrap-addrs, and prints the kubectl commands that
// load both into the cluster.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bootstrapkeys:", err)
		os.Exit(1)
	}
}

// fleet names the StatefulSet whose keys are made.
type fleet struct {
	n         int
	dir       string
	name      string // StatefulSet and headless Service name
	namespace string // for the printed commands
	port      int
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bootstrapkeys", flag.ContinueOnError)
	var f fleet
	fs.IntVar(&f.n, "n", 3, "number of bootstrap nodes (the StatefulSet's replicas)")
	fs.StringVar(&f.dir, "dir", "deploy/k8s/secrets", "directory for the keys and bootstrap-addrs (keep it out of git)")
	fs.StringVar(&f.name, "name", "overworld-bootstrap", "name of the StatefulSet and of its headless Service")
	fs.StringVar(&f.namespace, "namespace", "overworld", "namespace of the printed kubectl commands")
	fs.IntVar(&f.port, "port", 4001, "TCP port the bootstrap nodes listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	addrs, err := f.makeKeys()
	if err != nil {
		return err
	}
	list := strings.Join(addrs, ",")
	addrFile := filepath.Join(f.dir, "bootstrap-addrs")
	if err := os.WriteFile(addrFile, []byte(list+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", addrFile, err)
	}
	fmt.Fprintf(out, "%d bootstrap node(s); their in-cluster multiaddrs (in %s):\n", f.n, addrFile)
	for _, a := range addrs {
		fmt.Fprintf(out, "  %s\n", a)
	}
	fmt.Fprintf(out, "\nLoad them into the cluster:\n")
	fmt.Fprintf(out, "  kubectl -n %s create secret generic %s-keys", f.namespace, f.name)
	for i := range f.n {
		fmt.Fprintf(out, " --from-file=%s", f.keyPath(i))
	}
	fmt.Fprintf(out, "\n  kubectl -n %s create configmap overworld-network --from-literal=OVERWORLD_BOOTSTRAP=%s\n", f.namespace, list)
	fmt.Fprintf(out, "(add --dry-run=client -o yaml | kubectl apply -f - to update existing ones)\n")
	return nil
}

func (f fleet) keyPath(i int) string {
	return filepath.Join(f.dir, fmt.Sprintf("%s-%d.key", f.name, i))
}

// makeKeys loads or creates the key of every pod and returns the pods'
// multiaddrs: the headless Service's per-pod DNS names, short so that
// they resolve in whatever namespace the fleet runs.
func (f fleet) makeKeys() ([]string, error) {
	if f.n < 1 {
		return nil, fmt.Errorf("-n %d: want at least one bootstrap node", f.n)
	}
	if f.port < 1 || f.port > 65535 {
		return nil, fmt.Errorf("-port %d: want 1-65535", f.port)
	}
	if f.name == "" {
		return nil, fmt.Errorf("-name is empty")
	}
	var addrs []string
	for i := range f.n {
		key, err := node.LoadOrCreateIdentity(f.keyPath(i))
		if err != nil {
			return nil, err
		}
		id, err := peer.IDFromPrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("peer ID of %s: %w", f.keyPath(i), err)
		}
		addrs = append(addrs, fmt.Sprintf("/dns4/%s-%d.%s/tcp/%d/p2p/%s", f.name, i, f.name, f.port, id))
	}
	return addrs, nil
}
