package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// fieldManager owns what the launcher applies.
const fieldManager = "elastic-compile-cluster"

// serviceCIDR is the cluster's service range; 10.0.0.1 is the kubernetes Service.
const serviceCIDR = "10.0.0.0/24"

// operator is one Kubeflow component: where its release's manifests are and what it serves.
type operator struct {
	name        string   // its binary
	module      string   // its folder under cluster/
	manifests   []string // the release's kustomizations it installs from
	namespace   string   // where the release runs it
	webhookPort int
	healthPort  int
	caBundle    []byte // what the API server trusts for its webhook server
}

// startAll generates the PKI and starts the components in dependency order, each once the one
// before is ready: etcd, kube-apiserver, kube-controller-manager, the CRDs, the operators, their
// webhooks, the runtimes.
func (l *launcher) startAll(ctx context.Context, releaseDirs map[string]string) error {
	v, err := loadVersions(l.root)
	if err != nil {
		return err
	}
	pki := filepath.Join(l.state, "pki")
	ca, err := newKeyPair(certSpec{cn: "elastic-compile-ca", isCA: true}, nil)
	if err != nil {
		return err
	}
	caFile, _, err := ca.write(pki, "ca")
	if err != nil {
		return err
	}
	saKey, saPub, err := saKeys(pki)
	if err != nil {
		return err
	}
	issue := func(name string, spec certSpec, issuer *keyPair) (*keyPair, string, string, error) {
		p, err := newKeyPair(spec, issuer)
		if err != nil {
			return nil, "", "", err
		}
		c, k, err := p.write(pki, name)
		return p, c, k, err
	}
	st := clusterState{Kubeconfig: l.kubeconfig(), Health: map[string]string{}, Versions: v}

	// The operators: their ports and the CA bundle the API server trusts for each webhook server.
	ops := []*operator{
		{name: "jobset", module: "jobset", manifests: []string{"config/default"}, namespace: "jobset-system"},
		{name: "trainer", module: "trainer", manifests: []string{"manifests/base/crds", "manifests/base/webhook", "manifests/overlays/runtimes"}, namespace: "kubeflow-system"},
		{name: "training-operator", module: "training-operator", manifests: []string{"manifests/overlays/standalone"}, namespace: "kubeflow"},
	}
	var toCA *keyPair // training-operator's webhook CA, under ours
	for _, op := range ops {
		if op.webhookPort, err = freePort(); err != nil {
			return err
		}
		if op.healthPort, err = freePort(); err != nil {
			return err
		}
		op.caBundle = ca.certPEM
		if op.name == "training-operator" {
			// Its cert rotator (always on in v1.9.4) keeps a certificate it finds valid in the
			// Secret it reads: ours, from a CA named and keyed as the rotator makes its own.
			if toCA, err = newKeyPair(certSpec{cn: "training-operator-ca", orgs: []string{"training-operator"}, dns: []string{"training-operator-ca"}, isCA: true, rsaPKCS1: true}, ca); err != nil {
				return err
			}
			op.caBundle = toCA.certPEM
		}
	}
	// Rendering the releases' kustomizations takes seconds: it runs while etcd and the API server start.
	rendered := make(chan renderResult, 1)
	go func() {
		objs, err := renderReleases(ops, releaseDirs)
		rendered <- renderResult{objs, err}
	}()

	// etcd
	etcdPort, err1 := freePort()
	peerPort, err2 := freePort()
	if err := joinErrs(err1, err2); err != nil {
		return err
	}
	etcdURL := "http://" + hostPort(etcdPort)
	peerURL := "http://" + hostPort(peerPort)
	etcdEnv, err := l.env("etcd", "")
	if err != nil {
		return err
	}
	etcd, err := l.start("etcd", []string{
		"--name=default", "--data-dir=" + filepath.Join(l.state, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		// A test cluster's data does not outlive it: no fsync, as envtest runs etcd.
		"--unsafe-no-fsync", "--log-level=warn",
	}, etcdEnv, 0)
	if err != nil {
		return err
	}
	hc, err := plainClient()
	if err != nil {
		return err
	}
	st.Health["etcd"] = etcdURL + "/readyz"
	if err := l.waitFor(ctx, etcd, "etcd", func() error { return check(ctx, hc, st.Health["etcd"]) }); err != nil {
		return err
	}

	// kube-apiserver, with the admin's kubeconfig
	apiPort, err := freePort()
	if err != nil {
		return err
	}
	_, apiCert, apiKey, err := issue("kube-apiserver", withIPs(serving("kube-apiserver",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
		net.IPv4(10, 0, 0, 1)), ca)
	if err != nil {
		return err
	}
	admin, _, _, err := issue("admin", client("elastic-compile-admin", "system:masters"), ca)
	if err != nil {
		return err
	}
	st.Server = "https://" + hostPort(apiPort)
	if err := writeKubeconfig(l.kubeconfig(), st.Server, ca, admin); err != nil {
		return err
	}
	apiEnv, err := l.env("kube-apiserver", "")
	if err != nil {
		return err
	}
	apiserver, err := l.start("kube-apiserver", []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file=" + apiCert, "--tls-private-key-file=" + apiKey, "--client-ca-file=" + caFile,
		"--cert-dir=" + filepath.Join(l.state, "home", "kube-apiserver"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saPub, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC", "--allow-privileged=true",
		// Nothing serves the kubernetes Service's endpoints here (no pod network).
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, apiEnv, 1)
	if err != nil {
		return err
	}
	hc, err = l.healthClient()
	if err != nil {
		return err
	}
	st.Health["kube-apiserver"] = st.Server + "/readyz"
	if err := l.waitFor(ctx, apiserver, "kube-apiserver", func() error { return check(ctx, hc, st.Health["kube-apiserver"]) }); err != nil {
		return err
	}

	// kube-controller-manager: the Job controller (JobSet -> Jobs -> Pods), the service-account
	// and token controllers, the garbage collector, the namespace controller, ... each under its
	// own service account, as local-up-cluster.sh runs it.
	kcmPort, err := freePort()
	if err != nil {
		return err
	}
	_, kcmCert, kcmKey, err := issue("kube-controller-manager-serving", serving("kube-controller-manager"), ca)
	if err != nil {
		return err
	}
	kcmID, _, _, err := issue("kube-controller-manager", client("system:kube-controller-manager"), ca)
	if err != nil {
		return err
	}
	kcmConfig := filepath.Join(pki, "kube-controller-manager.kubeconfig")
	if err := writeKubeconfig(kcmConfig, st.Server, ca, kcmID); err != nil {
		return err
	}
	kcmEnv, err := l.env("kube-controller-manager", "")
	if err != nil {
		return err
	}
	kcm, err := l.start("kube-controller-manager", []string{
		"--kubeconfig=" + kcmConfig, "--authentication-kubeconfig=" + kcmConfig, "--authorization-kubeconfig=" + kcmConfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", kcmPort),
		"--tls-cert-file=" + kcmCert, "--tls-private-key-file=" + kcmKey,
		"--service-account-private-key-file=" + saKey, "--root-ca-file=" + caFile,
		"--use-service-account-credentials=true", "--service-cluster-ip-range=" + serviceCIDR,
		"--leader-elect=false", "--controllers=*", "--profiling=false",
	}, kcmEnv, 2)
	if err != nil {
		return err
	}
	st.Health["kube-controller-manager"] = "https://" + hostPort(kcmPort) + "/healthz"
	if err := l.waitFor(ctx, kcm, "kube-controller-manager", func() error { return check(ctx, hc, st.Health["kube-controller-manager"]) }); err != nil {
		return err
	}

	k, err := newKube(l.kubeconfig())
	if err != nil {
		return err
	}
	// The service-account controller makes each namespace's "default" account, which every pod
	// needs: the first one proves the controller manager works.
	if err := l.waitFor(ctx, kcm, "the default service account", func() error {
		_, err := k.core.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}

	result := <-rendered
	if result.err != nil {
		return result.err
	}
	objs := result.objs
	progress("rendered the releases' manifests: %d objects to install", len(objs))
	// Namespaces, CRDs, webhook configurations, then the operators; the runtimes last.
	for _, ns := range []string{"jobset-system", "kubeflow-system", "kubeflow"} {
		if _, err := k.core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if err := k.applyKinds(ctx, objs, "Namespace", "CustomResourceDefinition"); err != nil {
		return err
	}
	if err := k.waitEstablished(ctx, l, objs); err != nil {
		return err
	}
	progress("installed %d CRDs", count(objs, "CustomResourceDefinition"))

	// The webhook configurations before their servers run, as a release installs them: what
	// they match stays refused until the server answers, and training-operator's cert rotator
	// finds its configuration at once.
	if err := k.applyKinds(ctx, objs, "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"); err != nil {
		return err
	}
	procs := map[string]*proc{}
	for i, op := range ops {
		certDir := filepath.Join(l.state, "home", op.name, "k8s-webhook-server", "serving-certs")
		id, _, _, err := issue(op.name+"-client", client(op.name, "system:masters"), ca)
		if err != nil {
			return err
		}
		opConfig := filepath.Join(pki, op.name+".kubeconfig")
		if err := writeKubeconfig(opConfig, st.Server, ca, id); err != nil {
			return err
		}
		var args, extra []string
		switch op.name {
		case "jobset":
			cfg, err := l.jobsetConfig(releaseDirs[op.module], op, certDir)
			if err != nil {
				return err
			}
			args = []string{"--config=" + cfg, "--metrics-bind-address=0", "--health-probe-bind-address=" + hostPort(op.healthPort), "--leader-elect=false"}
		case "trainer":
			cfg, err := l.trainerConfig(releaseDirs[op.module], op)
			if err != nil {
				return err
			}
			args = []string{"--config=" + cfg}
		case "training-operator":
			srv, err := newKeyPair(serving("training-operator.kubeflow.svc", "training-operator.kubeflow.svc"), toCA)
			if err != nil {
				return err
			}
			if err := writeServing(certDir, srv); err != nil {
				return err
			}
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "training-operator-webhook-cert", Namespace: op.namespace},
				Data:       map[string][]byte{"ca.crt": toCA.certPEM, "ca.key": toCA.keyPEM, "tls.crt": srv.certPEM, "tls.key": srv.keyPEM},
			}
			if _, err := k.core.CoreV1().Secrets(op.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
				return err
			}
			args = []string{"--metrics-bind-address=0", "--health-probe-bind-address=" + hostPort(op.healthPort), fmt.Sprintf("--webhook-server-port=%d", op.webhookPort)}
			extra = []string{"MY_POD_NAMESPACE=" + op.namespace}
		}
		if op.name != "training-operator" {
			srv, err := newKeyPair(serving(op.name), ca)
			if err != nil {
				return err
			}
			if err := writeServing(certDir, srv); err != nil {
				return err
			}
		}
		env, err := l.env(op.name, opConfig, extra...)
		if err != nil {
			return err
		}
		p, err := l.start(op.name, args, env, 3+i)
		if err != nil {
			return err
		}
		procs[op.name] = p
		st.Health[op.name] = "http://" + hostPort(op.healthPort) + "/readyz"
	}
	plain, err := plainClient()
	if err != nil {
		return err
	}
	for _, op := range ops {
		if err := l.waitFor(ctx, procs[op.name], op.name, func() error { return check(ctx, plain, st.Health[op.name]) }); err != nil {
			return err
		}
	}
	if err := l.probeWebhooks(ctx, k, procs); err != nil {
		return err
	}
	if err := k.applyKinds(ctx, objs, "ClusterTrainingRuntime"); err != nil {
		return err
	}
	progress("installed %d ClusterTrainingRuntimes", count(objs, "ClusterTrainingRuntime"))
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.state, "cluster.json"), data, 0o644)
}

type renderResult struct {
	objs []*unstructured.Unstructured
	err  error
}

// renderReleases renders each operator's release manifests and keeps what the launcher installs,
// pointed at the operator's webhook server on 127.0.0.1.
func renderReleases(ops []*operator, releaseDirs map[string]string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, op := range ops {
		for _, m := range op.manifests {
			rendered, err := render(releaseDirs[op.module], m)
			if err != nil {
				return nil, err
			}
			for _, o := range rendered {
				if !installed[o.GetKind()] {
					continue
				}
				if err := forLoopback(o, op.webhookPort, op.caBundle); err != nil {
					return nil, err
				}
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

func writeServing(dir string, p *keyPair) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), p.certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), p.keyPEM, 0o600)
}

func withIPs(spec certSpec, ips ...net.IP) certSpec {
	spec.ips = append(append([]net.IP{}, spec.ips...), ips...)
	return spec
}

func count(objs []*unstructured.Unstructured, kind string) int {
	n := 0
	for _, o := range objs {
		if o.GetKind() == kind {
			n++
		}
	}
	return n
}

func joinErrs(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// jobsetConfig is the release's controller_manager_config.yaml with the webhook server on
// 127.0.0.1 (our certificate in certDir) and the release's own certificate management off.
func (l *launcher) jobsetConfig(releaseDir string, op *operator, certDir string) (string, error) {
	cfg, err := readYAML(filepath.Join(releaseDir, "config/components/manager/controller_manager_config.yaml"))
	if err != nil {
		return "", err
	}
	cfg["webhook"] = map[string]any{"port": op.webhookPort, "host": "127.0.0.1", "certDir": certDir}
	cfg["internalCertManagement"] = map[string]any{"enable": false}
	cfg["health"] = map[string]any{"healthProbeBindAddress": hostPort(op.healthPort)}
	cfg["metrics"] = map[string]any{"bindAddress": "0"}
	path := filepath.Join(l.state, "config", "jobset.yaml")
	return path, writeYAML(path, cfg)
}

// trainerConfig is the release's controller_manager_config.yaml with the webhook server on
// 127.0.0.1, metrics off, no leader election and the release's own certificate management off.
func (l *launcher) trainerConfig(releaseDir string, op *operator) (string, error) {
	cfg, err := readYAML(filepath.Join(releaseDir, "manifests/base/manager/controller_manager_config.yaml"))
	if err != nil {
		return "", err
	}
	cfg["webhook"] = map[string]any{"port": op.webhookPort, "host": "127.0.0.1"}
	health, _ := cfg["health"].(map[string]any)
	if health == nil {
		health = map[string]any{}
	}
	health["healthProbeBindAddress"] = hostPort(op.healthPort)
	cfg["health"] = health
	cfg["metrics"] = map[string]any{"bindAddress": "0"}
	if le, ok := cfg["leaderElection"].(map[string]any); ok {
		le["leaderElect"] = false
	}
	cm, _ := cfg["certManagement"].(map[string]any)
	if cm == nil {
		cm = map[string]any{}
	}
	cm["enable"] = false
	cfg["certManagement"] = cm
	path := filepath.Join(l.state, "config", "trainer.yaml")
	return path, writeYAML(path, cfg)
}

// kube is the launcher's client of the cluster.
type kube struct {
	core   kubernetes.Interface
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newKube(kubeconfig string) (*kube, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = fieldManager
	return newKubeFor(cfg)
}

func newKubeFor(cfg *rest.Config) (*kube, error) {
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &kube{core: core, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

func (k *kube) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := k.mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
	if err != nil {
		k.mapper.Reset()
		if m, err = k.mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version); err != nil {
			return nil, err
		}
	}
	if m.Scope.Name() == "namespace" {
		return k.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return k.dyn.Resource(m.Resource), nil
}

// applyKinds server-side applies the objects of the given kinds: kind after kind, the objects of
// one kind at once (the API server takes seconds over a large CRD, and has cores to spare).
func (k *kube) applyKinds(ctx context.Context, objs []*unstructured.Unstructured, kinds ...string) error {
	for _, kind := range kinds {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for _, o := range objs {
			if o.GetKind() != kind {
				continue
			}
			r, err := k.resource(o)
			if err != nil {
				return fmt.Errorf("%s %s: %w", kind, o.GetName(), err)
			}
			wg.Go(func() {
				if _, err := r.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("apply %s %s: %w", kind, o.GetName(), err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// waitEstablished waits until every CRD among objs is Established.
func (k *kube) waitEstablished(ctx context.Context, l *launcher, objs []*unstructured.Unstructured) error {
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		name := o.GetName()
		err := l.waitFor(ctx, nil, "CRD "+name, func() error {
			crd, err := k.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				if cm["type"] == "Established" && cm["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("not Established: %v", conds)
		})
		if err != nil {
			return err
		}
	}
	k.mapper.Reset()
	return nil
}

// A webhook probe: an object each operator's validating webhook denies, created as a server-side
// dry run. The denial, which names the webhook, proves the API server reaches the operator's
// server over TLS with the CA bundle it was given.
type webhookProbe struct {
	operator string
	webhook  string // the name the denial must carry
	object   string
}

var webhookProbes = []webhookProbe{
	{"training-operator", "validator.pytorchjob.training-operator.kubeflow.org", `{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "probe", "namespace": "default"},
		"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "not-pytorch", "image": "x"}]}}}}}}`},
	{"jobset", "vjobset.kb.io", `{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "probe", "namespace": "default"},
		"spec": {"managedBy": "no-domain-prefix", "replicatedJobs": [{"name": "r", "replicas": 1, "template": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}}]}}`},
	{"trainer", "validator.trainjob.trainer.kubeflow.org", `{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "probe", "namespace": "default"},
		"spec": {"runtimeRef": {"name": "no-such-runtime"}}}`},
}

func (l *launcher) probeWebhooks(ctx context.Context, k *kube, procs map[string]*proc) error {
	for _, probe := range webhookProbes {
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON([]byte(probe.object)); err != nil {
			return err
		}
		r, err := k.resource(o)
		if err != nil {
			return err
		}
		want := fmt.Sprintf("admission webhook %q denied the request", probe.webhook)
		err = l.waitFor(ctx, procs[probe.operator], probe.operator+"'s webhook "+probe.webhook, func() error {
			_, err := r.Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				return fmt.Errorf("%s %s was accepted: the webhook did not run", o.GetKind(), o.GetName())
			}
			if !strings.Contains(err.Error(), want) {
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
		progress("%s's webhook answers (%s)", probe.operator, probe.webhook)
	}
	return nil
}

// plainClient reads the operators' plain-HTTP health probes and etcd's.
func plainClient() (*http.Client, error) {
	return &http.Client{Timeout: 5 * time.Second}, nil
}
