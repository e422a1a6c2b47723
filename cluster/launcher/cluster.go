package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

// launcher holds the two directories every command works in.
type launcher struct {
	root  string // cluster/ of the project
	state string // the state directory (.cluster by default)
}

// clusterState is <state>/cluster.json: what status and the next up check.
type clusterState struct {
	Server     string            `json:"server"`
	Kubeconfig string            `json:"kubeconfig"`
	Health     map[string]string `json:"health"` // component -> the URL that answers 200 when it is ready
	Versions   versions          `json:"versions"`
}

func (l *launcher) kubeconfig() string { return filepath.Join(l.state, "kubeconfig") }

// lock serialises up, down and status on one state directory: a second `make cluster` waits for
// the first and then finds its cluster running instead of starting another.
func (l *launcher) lock() (func(), error) {
	if err := os.MkdirAll(l.state, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(l.state, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		progress("waiting for another cluster-launcher on %s", l.state)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() { f.Close() }, nil
}

func (l *launcher) up(ctx context.Context) error {
	unlock, err := l.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if ok, _ := l.ready(ctx); ok {
		progress("a ready cluster already runs from %s: reusing it", l.state)
		fmt.Printf("export KUBECONFIG=%s\n", l.kubeconfig())
		return nil
	}
	if n, err := l.stopAll(); err != nil {
		return err
	} else if n > 0 {
		progress("stopped %d processes of a cluster in %s that was not ready", n, l.state)
	}
	// A fresh cluster each time: new CA, new etcd. bin/ and build/ stay (Go's cache decides).
	for _, d := range []string{"pki", "config", "etcd", "logs", "run", "home"} {
		if err := os.RemoveAll(filepath.Join(l.state, d)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(l.state, d), 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{"cluster.json", "kubeconfig"} {
		if err := os.Remove(filepath.Join(l.state, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	began := time.Now()
	dirs, err := l.build(ctx)
	if err != nil {
		return err
	}
	built := time.Now()
	if err := l.startAll(ctx, dirs); err != nil {
		if n, stopErr := l.stopAll(); stopErr != nil {
			err = errors.Join(err, stopErr)
		} else {
			progress("stopped the %d processes this start had started", n)
		}
		return err
	}
	progress("ready: built in %.1f s, started in %.1f s; stop it with `make cluster-down`",
		built.Sub(began).Seconds(), time.Since(built).Seconds())
	fmt.Printf("export KUBECONFIG=%s\n", l.kubeconfig())
	return nil
}

func (l *launcher) down() error {
	unlock, err := l.lock()
	if err != nil {
		return err
	}
	defer unlock()
	n, err := l.stopAll()
	progress("stopped %d processes (state: %s)", n, l.state)
	return err
}

func (l *launcher) status(ctx context.Context) (bool, error) {
	unlock, err := l.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	ok, why := l.ready(ctx)
	if !ok {
		progress("no ready cluster in %s: %s", l.state, why)
		return false, nil
	}
	fmt.Printf("export KUBECONFIG=%s\n", l.kubeconfig())
	return true, nil
}

// ready says whether every component the state records runs and answers its readiness check.
func (l *launcher) ready(ctx context.Context) (bool, string) {
	data, err := os.ReadFile(filepath.Join(l.state, "cluster.json"))
	if err != nil {
		return false, "no cluster.json"
	}
	var st clusterState
	if err := json.Unmarshal(data, &st); err != nil {
		return false, err.Error()
	}
	recs, err := l.records()
	if err != nil {
		return false, err.Error()
	}
	running := map[string]bool{}
	for _, r := range recs {
		running[r.Name] = r.alive()
	}
	for _, b := range binaries {
		if !running[b.name] {
			return false, b.name + " is not running"
		}
	}
	hc, err := l.healthClient()
	if err != nil {
		return false, err.Error()
	}
	for name, url := range st.Health {
		if err := check(ctx, hc, url); err != nil {
			return false, fmt.Sprintf("%s: %v", name, err)
		}
	}
	return true, ""
}

// healthClient reads the health endpoints: HTTPS ones with the cluster's CA and the admin's
// certificate (the API server's /readyz wants a user), plain HTTP for the operators' probes.
func (l *launcher) healthClient() (*http.Client, error) {
	caPEM, err := os.ReadFile(filepath.Join(l.state, "pki", "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("pki/ca.crt: no certificate")
	}
	admin, err := tls.LoadX509KeyPair(filepath.Join(l.state, "pki", "admin.crt"), filepath.Join(l.state, "pki", "admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{admin}}},
	}, nil
}

func check(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Readiness polling: at most readyPolls checks, readyEvery apart, per component (two minutes
// at 250 ms). A component that exits meanwhile fails the start at once, with its log's end.
const (
	readyPolls = 480
	readyEvery = 250 * time.Millisecond
)

// waitFor polls cond until it returns nil, the process exits, or the polls run out.
func (l *launcher) waitFor(ctx context.Context, p *proc, what string, cond func() error) error {
	var last error
	for range readyPolls {
		if last = cond(); last == nil {
			if p != nil && what == p.Name {
				progress("%s is ready", what)
			}
			return nil
		}
		if p != nil {
			select {
			case <-p.exited:
				return fmt.Errorf("%s exited (%v) while waiting for %s\n%s", p.Name, p.err, what, l.logTail(p.Name))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(readyEvery):
		}
	}
	tail := ""
	if p != nil {
		tail = "\n" + l.logTail(p.Name)
	}
	return fmt.Errorf("%s: not ready after %d checks: %v%s", what, readyPolls, last, tail)
}

// logTail is the end of a component's log, for an error message.
func (l *launcher) logTail(name string) string {
	data, err := os.ReadFile(l.logFile(name))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return fmt.Sprintf("--- the last lines of %s:\n%s", l.logFile(name), strings.Join(lines, "\n"))
}

// env is a component's whole environment: PATH, its kubeconfig, and a HOME and TMPDIR of its own
// in the state directory (controller-runtime's webhook servers read their certificate from
// $TMPDIR/k8s-webhook-server/serving-certs). Nothing else of the caller's leaks in.
func (l *launcher) env(name, kubeconfig string, extra ...string) ([]string, error) {
	home := filepath.Join(l.state, "home", name)
	if err := os.MkdirAll(filepath.Join(home, "k8s-webhook-server", "serving-certs"), 0o755); err != nil {
		return nil, err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home}
	if kubeconfig != "" {
		env = append(env, "KUBECONFIG="+kubeconfig)
	}
	return append(env, extra...), nil
}

// writeYAML writes a component's configuration file.
func writeYAML(path string, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// readYAML reads a release's configuration file into a generic map to override a few keys.
func readYAML(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, yaml.Unmarshal(data, &m)
}

// saKeys writes the service-account signing key pair (the API server signs tokens, the
// controller manager's token controller too).
func saKeys(dir string) (keyFile, pubFile string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", fmt.Sprint(port)) }
