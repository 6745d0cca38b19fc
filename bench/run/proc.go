package run

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// cpuTime reads the proxy's CPU time if it can tell, otherwise this
// process's, and says which it measured.
func cpuTime(p Proxy) (time.Duration, string) {
	if r, ok := p.(CPUReporter); ok {
		if d, err := r.CPUTime(); err == nil {
			return d, "proxy process user+system CPU (/proc/PID/stat) per request"
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, ""
	}
	d := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return d, "whole bench process CPU per request (getrusage): proxy in-process, so engines and load driver included — an upper bound"
}

// ProcCPUTime returns a process's user+system CPU time from /proc.
func ProcCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("malformed /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed /proc stat")
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// ExecFactory runs the proxy as a child process, so that its CPU time can be
// told apart from the engines' and the driver's. argv returns the command
// line for a policy, the backends and the listen address to use; readyPath
// (e.g. "/health") is polled until it answers 200.
func ExecFactory(argv func(policy string, backends []string, listen string) []string, readyPath string) ProxyFactory {
	return func(policy string, backends []string) (Proxy, error) {
		listen, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := argv(policy, backends, listen)
		if len(args) == 0 {
			return nil, errors.New("empty proxy command")
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		p := &process{cmd: cmd, url: "http://" + listen, exited: make(chan struct{})}
		go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, err := http.Get(p.url + readyPath)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return p, nil
				}
			}
			select {
			case <-p.exited:
				return nil, fmt.Errorf("proxy exited before ready: %v", p.waitErr)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				p.Close()
				return nil, fmt.Errorf("proxy not ready at %s%s", p.url, readyPath)
			}
		}
	}
}

type process struct {
	cmd     *exec.Cmd
	url     string
	exited  chan struct{}
	waitErr error
}

func (p *process) URL() string { return p.url }

func (p *process) CPUTime() (time.Duration, error) { return ProcCPUTime(p.cmd.Process.Pid) }

// Close stops the proxy with SIGTERM, then SIGKILL after 10s.
func (p *process) Close() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return nil
}

// freeAddr picks a free loopback port. Another process could take it before
// the proxy binds it; the readiness check then fails loudly.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
