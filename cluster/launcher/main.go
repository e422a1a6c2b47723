// Command cluster-launcher builds and runs the real control plane the tests use: etcd,
// kube-apiserver and kube-controller-manager, training-operator, Kubeflow Trainer and JobSet,
// each built from its Go module at the release pinned in cluster/versions.yaml, all on
// 127.0.0.1 with a CA generated at start. No kubelet and no scheduler: pods stay Pending.
//
//	cluster-launcher up      build, start, wait until ready; last stdout line: export KUBECONFIG=...
//	cluster-launcher down    stop every process the state directory records
//	cluster-launcher status  exit 0 and print the export line if a ready cluster runs, else exit 3
//	cluster-launcher build   build the binaries only, printing each one's build time
//
// Progress goes to stderr. docs/development.md ("The real control plane") is the reference.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// shellSafe are the characters a state directory's path may have.
const shellSafe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._+:@-"

// exitNotRunning is status's answer when no ready cluster runs (LSB's "program is not running").
const exitNotRunning = 3

func main() {
	fs := flag.NewFlagSet("cluster-launcher", flag.ExitOnError)
	root := fs.String("root", "cluster", "the cluster/ folder of the project: versions.yaml and one Go module per component")
	state := fs.String("state", ".cluster", "the state directory: binaries, certificates, kubeconfigs, logs, pid files, etcd's data")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cluster-launcher [-root DIR] [-state DIR] up|down|status|build\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	rootDir, err1 := filepath.Abs(*root)
	stateDir, err2 := filepath.Abs(*state)
	if err := errors.Join(err1, err2); err != nil {
		fail(err)
	}
	// The export line is shell: a path of these characters needs no quoting.
	if strings.Trim(stateDir, shellSafe) != "" {
		fail(fmt.Errorf("the state directory %q has characters a shell would need quoted: use a path of [A-Za-z0-9/._+:@-]", stateDir))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	l := &launcher{root: rootDir, state: stateDir}
	switch fs.Arg(0) {
	case "up":
		err := l.up(ctx)
		if err != nil {
			fail(err)
		}
	case "down":
		if err := l.down(); err != nil {
			fail(err)
		}
	case "status":
		ok, err := l.status(ctx)
		if err != nil {
			fail(err)
		}
		if !ok {
			os.Exit(exitNotRunning)
		}
	case "build":
		if _, err := l.build(ctx); err != nil {
			fail(err)
		}
	default:
		fs.Usage()
		os.Exit(2)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "cluster-launcher: %v\n", err)
	os.Exit(1)
}

// began is when the launcher started: progress lines carry the time since.
var began = time.Now()

// progress reports one step on stderr; stdout carries only the export line.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cluster: [%5.1f s] "+format+"\n", append([]any{time.Since(began).Seconds()}, args...)...)
}
