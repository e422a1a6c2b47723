package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pidRecord is a started process as its pid file records it. The start time (clock ticks since
// boot, /proc/<pid>/stat) tells the process from a later one that reused its pid: down never
// signals a process it did not start.
type pidRecord struct {
	Name  string `json:"name"`
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
	Order int    `json:"order"`
}

// proc is a process this launcher run started.
type proc struct {
	pidRecord
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed
}

func (l *launcher) runDir() string { return filepath.Join(l.state, "run") }
func (l *launcher) logFile(name string) string {
	return filepath.Join(l.state, "logs", name+".log")
}

// start runs a component in its own session (so that a terminal's ^C reaches the launcher,
// which stops everything, and not the components one by one), with stdin from /dev/null and
// stdout and stderr to its log file, and records it in its pid file.
func (l *launcher) start(name string, args, env []string, order int) (*proc, error) {
	logf, err := os.Create(l.logFile(name))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(l.state, "bin", name), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env
	cmd.Dir = l.state
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{pidRecord: pidRecord{Name: name, Pid: cmd.Process.Pid, Order: order}, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	start, err := startTime(p.Pid)
	if err == nil {
		p.Start = start
		var data []byte
		data, err = json.Marshal(p.pidRecord)
		if err == nil {
			err = os.WriteFile(filepath.Join(l.runDir(), name+".pid"), data, 0o644)
		}
	}
	if err != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	progress("started %s (pid %d, log %s)", name, p.Pid, l.logFile(name))
	return p, nil
}

// startTime is field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot.
// The fields after the command name (in parentheses, which may hold anything) are space-separated.
func startTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[end+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	if fields[0] == "Z" {
		return 0, fmt.Errorf("pid %d has exited", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive says whether the recorded process still runs (and is the one recorded).
func (r pidRecord) alive() bool {
	start, err := startTime(r.Pid)
	return err == nil && start == r.Start
}

// records reads the pid files, in start order.
func (l *launcher) records() ([]pidRecord, error) {
	entries, err := os.ReadDir(l.runDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []pidRecord
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(l.runDir(), e.Name()))
		if err != nil {
			return nil, err
		}
		var r pidRecord
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Order < recs[j].Order })
	return recs, nil
}

// Bounds on stopping: SIGTERM, then up to termPolls checks pollEvery apart, then SIGKILL and
// as many checks again.
const (
	termPolls = 100
	pollEvery = 100 * time.Millisecond
)

// stopAll stops every recorded process, the last started first (the operators before the API
// server, the API server before etcd), and removes the pid files. It returns how many it stopped.
func (l *launcher) stopAll() (int, error) {
	recs, err := l.records()
	if err != nil {
		return 0, err
	}
	stopped := 0
	var errs []error
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.alive() {
			if err := stop(r); err != nil {
				errs = append(errs, err)
				continue
			}
			stopped++
			progress("stopped %s (pid %d)", r.Name, r.Pid)
		}
		if err := os.Remove(filepath.Join(l.runDir(), r.Name+".pid")); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return stopped, errors.Join(errs...)
}

// stop ends one process and its session's process group.
func stop(r pidRecord) error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := syscall.Kill(-r.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %s (pid %d): %w", r.Name, r.Pid, err)
		}
		for range termPolls {
			if !r.alive() {
				return nil
			}
			time.Sleep(pollEvery)
		}
	}
	return fmt.Errorf("%s (pid %d) still runs after SIGKILL", r.Name, r.Pid)
}

// freePort asks the kernel for a free port on 127.0.0.1. Another process may take it before the
// component binds it; the component then fails to start and the launcher says so.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
