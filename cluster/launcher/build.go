package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// binary is one program of the control plane and the Go module (a folder of cluster/) it is built in.
type binary struct {
	name    string // the file under <state>/bin and the component's name in logs and pid files
	module  string // the folder under cluster/ holding the go.mod it is built with
	release string // the module path of the release it comes from
	pkg     string // the main package
	version func(versions) string
	ldflags func(versions) string
	edits   []sourceEdit // build-time edits to the release's source (an overlay); see sourceEdit
}

// sourceEdit replaces one exact snippet of a release's file at build time. Go builds nothing
// edited from its module cache (an -overlay may not replace files there), so the release is
// copied into the state directory, edited there, and built through a generated go.mod that
// replaces the release by that copy; the project's go.mod and the module cache stay as they
// are. Each edit must apply exactly once: a different release fails the build instead of
// silently losing the edit.
type sourceEdit struct {
	file, old, new, why string
}

func kubeVersion(v versions) string { return v.Kubernetes }

// kubeLdflags stamps the version kubernetes' own build stamps (hack/lib/version.sh), so the
// API server's /version says v1.37.x rather than v0.0.0-master.
func kubeLdflags(v versions) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(v.Kubernetes, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	pkg := "k8s.io/component-base/version"
	return fmt.Sprintf("-X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
		pkg, v.Kubernetes, major, minor)
}

var binaries = []binary{
	{name: "etcd", module: "etcd", release: "go.etcd.io/etcd/server/v3", pkg: "go.etcd.io/etcd/server/v3",
		version: func(v versions) string { return v.Etcd }},
	{name: "kube-apiserver", module: "kube", release: "k8s.io/kubernetes", pkg: "k8s.io/kubernetes/cmd/kube-apiserver",
		version: kubeVersion, ldflags: kubeLdflags},
	{name: "kube-controller-manager", module: "kube", release: "k8s.io/kubernetes", pkg: "k8s.io/kubernetes/cmd/kube-controller-manager",
		version: kubeVersion, ldflags: kubeLdflags},
	{name: "jobset", module: "jobset", release: "sigs.k8s.io/jobset", pkg: "sigs.k8s.io/jobset",
		version: func(v versions) string { return v.JobSet }},
	{name: "trainer", module: "trainer", release: "github.com/kubeflow/trainer/v2", pkg: "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
		version: func(v versions) string { return v.Trainer }},
	{name: "training-operator", module: "training-operator", release: "github.com/kubeflow/training-operator",
		pkg:     "github.com/kubeflow/training-operator/cmd/training-operator.v1",
		version: func(v versions) string { return v.TrainingOperator },
		// v1.9.4 has no flag for either: its webhook server would listen on every interface,
		// and its cert rotator waits for a file under the machine-wide /tmp.
		edits: []sourceEdit{
			{
				file: "cmd/training-operator.v1/main.go",
				old:  "webhook.NewServer(webhook.Options{\n\t\t\tPort: webhookServerPort,\n",
				new:  "webhook.NewServer(webhook.Options{\n\t\t\tHost: \"127.0.0.1\",\n\t\t\tPort: webhookServerPort,\n",
				why:  "the webhook server listens on 127.0.0.1 only",
			},
			{
				file: "pkg/cert/cert.go",
				old:  "\t\tCertDir:        certDir,\n",
				new:  "\t\tCertDir:        os.TempDir() + \"/k8s-webhook-server/serving-certs\",\n",
				why:  "the cert rotator looks for the serving certificate where the webhook server reads it ($TMPDIR, as controller-runtime does)",
			},
		},
	},
}

// moduleInfo is what `go mod download -json` says of a module of a build list.
type moduleInfo struct {
	Path, Version, Dir, Error string
}

// releaseDir downloads (or finds in the module cache) the release a module folder requires and
// checks its version against versions.yaml.
func (l *launcher) releaseDir(ctx context.Context, module, release, want string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", release)
	cmd.Dir = filepath.Join(l.root, module)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s (in %s): %w\n%s%s", release, cmd.Dir, err, out, stderr.String())
	}
	var info moduleInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", release, err)
	}
	if info.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", release, info.Error)
	}
	if info.Version != want {
		return "", fmt.Errorf("%s/go.mod requires %s %s, cluster/versions.yaml pins %s", cmd.Dir, release, info.Version, want)
	}
	return info.Dir, nil
}

// build builds every binary into <state>/bin (Go's build cache makes a second build a link at
// most) and returns the release directories in the module cache, by module folder.
func (l *launcher) build(ctx context.Context) (map[string]string, error) {
	v, err := loadVersions(l.root)
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{}
	for _, b := range binaries {
		key := b.module
		if _, seen := dirs[key]; !seen {
			dir, err := l.releaseDir(ctx, b.module, b.release, b.version(v))
			if err != nil {
				return nil, err
			}
			dirs[key] = dir
		}
		if b.module == "kube" {
			// The staging modules replace k8s.io/kubernetes' v0.0.0 requirements: the same release.
			if _, err := l.releaseDir(ctx, "kube", "k8s.io/api", v.KubernetesStaging); err != nil {
				return nil, err
			}
		}
		// -s -w: no symbol table, no DWARF, as kubernetes' own release builds; the link is faster.
		ldflags := "-s -w"
		if b.ldflags != nil {
			ldflags += " " + b.ldflags(v)
		}
		args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(l.state, "bin", b.name)}
		if len(b.edits) > 0 {
			modfile, err := l.editedCopy(b, dirs[key])
			if err != nil {
				return nil, err
			}
			args = append(args, "-modfile", modfile)
		}
		args = append(args, b.pkg)
		start := time.Now()
		progress("building %s %s (cluster/%s)", b.name, b.version(v), b.module)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(l.root, b.module)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		// Interrupted, the go command stops its compilers itself; SIGKILL would orphan them.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 10 * time.Second
		cmd.Stdout = os.Stderr
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go %s (in %s): %w", strings.Join(args, " "), cmd.Dir, err)
		}
		// CPU time (the go command's and its compilers') says more than wall time on a shared machine.
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		progress("built %s in %.1f s (%.0f CPU-seconds)", b.name, time.Since(start).Seconds(), cpu.Seconds())
	}
	return dirs, nil
}

// editedCopy copies a release from the module cache into <state>/build/<name>/src, applies the
// binary's edits, and writes <state>/build/<name>/go.mod (and go.sum): the module folder's own,
// plus a replace of the release by the copy. It returns that go.mod, for `go build -modfile`.
func (l *launcher) editedCopy(b binary, releaseDir string) (string, error) {
	dir := filepath.Join(l.state, "build", b.name)
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	if err := copyTree(releaseDir, src); err != nil {
		return "", err
	}
	for _, e := range b.edits {
		path := filepath.Join(src, e.file)
		data, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		if n := strings.Count(string(data), e.old); n != 1 {
			return "", fmt.Errorf("%s: the edit %q (%s) matches %d times, not once: a different release?",
				filepath.Join(releaseDir, e.file), e.old, e.why, n)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(data), e.old, e.new, 1)), 0o644); err != nil {
			return "", err
		}
	}
	folder := filepath.Join(l.root, b.module)
	mod, err := os.ReadFile(filepath.Join(folder, "go.mod"))
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(folder, "go.sum"))
	if err != nil {
		return "", err
	}
	mod = append(mod, fmt.Sprintf("\n// Generated by cluster-launcher: the release, with %d edits.\nreplace %s => %s\n", len(b.edits), b.release, src)...)
	modfile := filepath.Join(dir, "go.mod")
	if err := os.WriteFile(modfile, mod, 0o644); err != nil {
		return "", err
	}
	return modfile, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
}

// copyTree copies a directory of regular files (a module from Go's module cache, read-only
// there) into dst, writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
