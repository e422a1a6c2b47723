package main

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// render builds one of a release's kustomizations, as `kubectl kustomize` (the same kustomize)
// would, from the release's directory in the module cache.
func render(releaseDir, kustomization string) ([]*unstructured.Unstructured, error) {
	dir := filepath.Join(releaseDir, kustomization)
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize %s: %w", dir, err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}

// The kinds the launcher installs from a release's manifests. The rest (Deployment, Service,
// RBAC for the operator's service account, the empty certificate Secret) is how the release
// runs in a pod; here the operator runs as a process with a client certificate of its own.
var installed = map[string]bool{
	"Namespace":                      true,
	"CustomResourceDefinition":       true,
	"ValidatingWebhookConfiguration": true,
	"MutatingWebhookConfiguration":   true,
	"ClusterTrainingRuntime":         true,
}

// toLoopback points a webhook client configuration that names the operator's Service at the
// operator's webhook server on 127.0.0.1 instead, trusting the given CA bundle.
func toLoopback(clientConfig map[string]any, port int, caBundle []byte) error {
	service, ok := clientConfig["service"].(map[string]any)
	if !ok {
		return fmt.Errorf("clientConfig has no service: %v", clientConfig)
	}
	path, _ := service["path"].(string)
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	delete(clientConfig, "service")
	clientConfig["url"] = fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
	// unstructured holds []byte fields in their JSON form: base64.
	clientConfig["caBundle"] = base64.StdEncoding.EncodeToString(caBundle)
	return nil
}

// forLoopback rewrites the objects of a release that call its webhook server (webhook
// configurations; a CRD's conversion webhook) to call it on 127.0.0.1:port with the CA bundle,
// and drops cert-manager's CA-injection annotations, which nothing here serves.
func forLoopback(obj *unstructured.Unstructured, port int, caBundle []byte) error {
	switch obj.GetKind() {
	case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		hooks, _, err := unstructured.NestedSlice(obj.Object, "webhooks")
		if err != nil {
			return err
		}
		for _, h := range hooks {
			hook, ok := h.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: a webhook that is not an object", obj.GetName())
			}
			cc, ok := hook["clientConfig"].(map[string]any)
			if !ok {
				return fmt.Errorf("%s: webhook %v has no clientConfig", obj.GetName(), hook["name"])
			}
			if err := toLoopback(cc, port, caBundle); err != nil {
				return fmt.Errorf("%s: %w", obj.GetName(), err)
			}
		}
		if err := unstructured.SetNestedSlice(obj.Object, hooks, "webhooks"); err != nil {
			return err
		}
	case "CustomResourceDefinition":
		cc, found, err := unstructured.NestedMap(obj.Object, "spec", "conversion", "webhook", "clientConfig")
		if err != nil {
			return err
		}
		if found {
			if err := toLoopback(cc, port, caBundle); err != nil {
				return fmt.Errorf("%s: %w", obj.GetName(), err)
			}
			if err := unstructured.SetNestedMap(obj.Object, cc, "spec", "conversion", "webhook", "clientConfig"); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	annotations := obj.GetAnnotations()
	delete(annotations, "cert-manager.io/inject-ca-from")
	obj.SetAnnotations(annotations)
	return nil
}
