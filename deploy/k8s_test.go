package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/yannh/kubeconform/pkg/validator"
	_ "k8s.io/client-go/util/homedir" // keeps k8s.io/client-go, whose OpenAPI documents the schemas come from, in go.mod
	"sigs.k8s.io/yaml"
)

// clientGoOpenAPI is where client-go keeps the Kubernetes API's OpenAPI v3
// documents (core/v1, apps/v1, batch/v1, ...) that its own tests embed;
// the version of client-go in go.mod fixes the API version the manifests
// are checked against (v0.32: Kubernetes 1.32).
const clientGoOpenAPI = "openapi/openapitest/testdata"

// k8sSchemas writes kubeconform's schema layout for every kind in the
// OpenAPI documents into a temporary directory, once per test binary.
var k8sSchemas = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/client-go").Output()
	if err != nil {
		return "", fmt.Errorf("locate k8s.io/client-go in the module cache: %w", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), clientGoOpenAPI)
	dir, err := os.MkdirTemp("", "overworld-k8s-schemas-")
	if err != nil {
		return "", err
	}
	cleanupDirs = append(cleanupDirs, dir)
	files, err := filepath.Glob(filepath.Join(src, "*_openapi.json"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no OpenAPI documents in %s (%v)", src, err)
	}
	for _, f := range files {
		if err := writeSchemas(f, dir); err != nil {
			return "", err
		}
	}
	return dir, nil
})

// cleanupDirs are directories shared by the tests (the schemas, the
// binaries), removed when they are done.
var cleanupDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range cleanupDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// writeSchemas turns one OpenAPI v3 document into JSON schemas in the
// file layout kubeconform looks up ({{kind}}-{{group}}-{{version}}.json):
// the document's components, made strict, in one file per group version,
// and per kind a schema that refers into it. Strict is what kubeconform's
// -strict schemas are: an object with declared properties accepts no
// other ones, so a misspelt or misplaced field fails instead of being
// silently dropped by the API server.
func writeSchemas(openapiFile, dir string) error {
	raw, err := os.ReadFile(openapiFile)
	if err != nil {
		return err
	}
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", openapiFile, err)
	}
	for _, s := range doc.Components.Schemas {
		forbidUnknownFields(s)
	}
	defsName := strings.TrimSuffix(filepath.Base(openapiFile), ".json") + ".defs.json"
	defs, err := json.Marshal(map[string]any{"components": map[string]any{"schemas": doc.Components.Schemas}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, defsName), defs, 0o644); err != nil {
		return err
	}
	for name, s := range doc.Components.Schemas {
		m, _ := s.(map[string]any)
		gvks, _ := m["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			suffix := "-" + version
			if group != "" {
				suffix = "-" + strings.ToLower(strings.Split(group, ".")[0]) + suffix
			}
			ref, err := json.Marshal(map[string]string{"$ref": defsName + "#/components/schemas/" + name})
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, strings.ToLower(kind)+suffix+".json"), ref, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func forbidUnknownFields(v any) {
	switch v := v.(type) {
	case map[string]any:
		_, hasProps := v["properties"]
		_, hasAdditional := v["additionalProperties"]
		preserve, _ := v["x-kubernetes-preserve-unknown-fields"].(bool)
		if hasProps && !hasAdditional && !preserve {
			v["additionalProperties"] = false
		}
		for _, child := range v {
			forbidUnknownFields(child)
		}
	case []any:
		for _, child := range v {
			forbidUnknownFields(child)
		}
	}
}

func newK8sValidator(t *testing.T) validator.Validator {
	t.Helper()
	dir, err := k8sSchemas()
	if err != nil {
		t.Fatal(err)
	}
	v, err := validator.New([]string{filepath.Join(dir, "{{ .ResourceKind }}{{ .KindSuffix }}.json")},
		validator.Opts{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// object is one Kubernetes resource from the manifests, decoded loosely.
type object struct {
	File       string
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec struct {
		// Services
		Ports []struct {
			Port int `json:"port"`
		} `json:"ports"`
		// Workloads
		Template struct {
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

type podSpec struct {
	HostNetwork    bool        `json:"hostNetwork"`
	DNSPolicy      string      `json:"dnsPolicy"`
	InitContainers []container `json:"initContainers"`
	Containers     []container `json:"containers"`
	Volumes        []struct {
		Name   string `json:"name"`
		Secret *struct {
			SecretName string `json:"secretName"`
		} `json:"secret"`
	} `json:"volumes"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			ConfigMapKeyRef *keyRef `json:"configMapKeyRef"`
			SecretKeyRef    *keyRef `json:"secretKeyRef"`
			FieldRef        *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `json:"name"`
		} `json:"configMapRef"`
	} `json:"envFrom"`
}

type keyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// manifestFiles are the Kubernetes manifests under k8s/, without the
// kustomizations.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("k8s", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "secrets" { // the operator's generated keys, never committed
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".yaml") && d.Name() != "kustomization.yaml" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests under k8s/")
	}
	return files
}

// loadObjects decodes every document of the manifests.
func loadObjects(t *testing.T) []object {
	t.Helper()
	var objs []object
	for _, f := range manifestFiles(t) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(raw) {
			var o object
			if err := yaml.Unmarshal(doc, &o); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			o.File = f
			objs = append(objs, o)
		}
	}
	return objs
}

// splitYAML splits a multi-document YAML file at its "---" lines,
// dropping documents that hold only comments.
func splitYAML(raw []byte) [][]byte {
	var docs [][]byte
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var body bool
		for _, line := range strings.Split(string(doc), "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				body = true
				break
			}
		}
		if body {
			docs = append(docs, doc)
		}
	}
	return docs
}

// TestKubernetesManifestsValidate checks every resource of every manifest
// against the Kubernetes API schema with kubeconform, strictly.
func TestKubernetesManifestsValidate(t *testing.T) {
	v := newK8sValidator(t)
	kinds := map[string]int{}
	for _, f := range manifestFiles(t) {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		results := v.Validate(f, fh)
		if len(results) == 0 {
			t.Errorf("%s: no resources", f)
		}
		for _, r := range results {
			switch r.Status {
			case validator.Valid:
				sig, _ := r.Resource.Signature()
				kinds[sig.Kind]++
			case validator.Empty:
			default:
				t.Errorf("%s: %v", f, r.Err)
				for _, ve := range r.ValidationErrors {
					t.Errorf("  %s: %s", ve.Path, ve.Msg)
				}
			}
		}
	}
	t.Logf("valid resources by kind: %v", kinds)
	for _, want := range []string{"StatefulSet", "Deployment", "DaemonSet", "Service", "ConfigMap", "Namespace"} {
		if kinds[want] == 0 {
			t.Errorf("no valid %s among the manifests", want)
		}
	}
}

// TestKubernetesSchemasCatchMistakes makes sure the validation has teeth:
// the schemas refuse a misspelt field, a wrong type and a missing
// required field, and know every kind.
func TestKubernetesSchemasCatchMistakes(t *testing.T) {
	v := newK8sValidator(t)
	const base = `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
        - name: c
          image: overworld
`
	cases := map[string]string{
		"misspelt field":  base + "          imagePullPolicyy: Always\n",
		"wrong type":      strings.Replace(base, "spec:\n  selector", "spec:\n  replicas: three\n  selector", 1),
		"missing name":    strings.Replace(base, "        - name: c\n          image: overworld\n", "        - image: overworld\n", 1),
		"unknown kind":    "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n",
		"port not number": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports:\n    - port: http\n",
	}
	ok := v.Validate("base.yaml", io.NopCloser(strings.NewReader(base)))
	if len(ok) != 1 || ok[0].Status != validator.Valid {
		t.Fatalf("the valid base manifest did not validate: %+v", ok)
	}
	for name, doc := range cases {
		res := v.Validate(name, io.NopCloser(strings.NewReader(doc)))
		if len(res) != 1 || res[0].Status == validator.Valid {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestKustomizations checks that each kustomization lists exactly the
// manifests beside it, that they exist, and that every resource lives
// in the overworld namespace with the image the kustomization replaces.
func TestKustomizations(t *testing.T) {
	dirs := map[string]bool{}
	for _, f := range manifestFiles(t) {
		dirs[filepath.Dir(f)] = true
	}
	for dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		var k struct {
			APIVersion string   `json:"apiVersion"`
			Kind       string   `json:"kind"`
			Namespace  string   `json:"namespace"`
			Resources  []string `json:"resources"`
			Images     []struct {
				Name    string `json:"name"`
				NewName string `json:"newName"`
				NewTag  string `json:"newTag"`
			} `json:"images"`
		}
		if err := yaml.UnmarshalStrict(raw, &k); err != nil {
			t.Errorf("%s/kustomization.yaml: %v", dir, err)
			continue
		}
		if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || k.Namespace != "overworld" {
			t.Errorf("%s/kustomization.yaml: %s %s namespace %q", dir, k.APIVersion, k.Kind, k.Namespace)
		}
		if len(k.Images) != 1 || k.Images[0].Name != "overworld" || k.Images[0].NewName == "" || k.Images[0].NewTag == "" {
			t.Errorf("%s/kustomization.yaml: want one image entry for overworld, got %+v", dir, k.Images)
		}
		listed := map[string]bool{}
		for _, r := range k.Resources {
			listed[r] = true
			if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
				t.Errorf("%s/kustomization.yaml: resource %s: %v", dir, r, err)
			}
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") && e.Name() != "kustomization.yaml" && !listed[e.Name()] {
				t.Errorf("%s/%s is not in its kustomization", dir, e.Name())
			}
		}
	}
	for _, o := range loadObjects(t) {
		if o.Kind == "Namespace" {
			continue
		}
		if o.Metadata.Namespace != "overworld" {
			t.Errorf("%s: %s %s in namespace %q, want overworld", o.File, o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
		for _, c := range slices.Concat(o.Spec.Template.Spec.Containers, o.Spec.Template.Spec.InitContainers) {
			if c.Image != "overworld" && !strings.Contains(c.Image, ":") {
				t.Errorf("%s: container %s: image %q has no pinned tag", o.File, c.Name, c.Image)
			}
		}
	}
}
