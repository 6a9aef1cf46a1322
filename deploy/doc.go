// Package deploy holds no code the binary runs: it is the operator's
// deployment of overworld (compose.yaml, the Kubernetes manifests in k8s/,
// systemd units, the Grafana dashboard in grafana/) and the tests that
// keep them honest. The tests validate every Kubernetes manifest against
// the Kubernetes API's schemas with kubeconform (offline: the schemas come
// from the OpenAPI documents client-go ships in the module cache), load
// the compose file with compose-go (the compose specification's schema and
// interpolation), check that every subcommand flag and OVERWORLD_*
// variable the manifests pass exists in cmd/overworld, that every metric
// the dashboard queries is registered by the service that exports it,
// built the way the binary builds it, and run the manifests' and the
// compose file's command lines as processes on 127.0.0.1 until peers,
// bots and mirrors play. See README.md for how an operator uses each file.
package deploy
