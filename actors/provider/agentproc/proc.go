// Package agentproc is the process plumbing of the agent drivers (exec,
// codex, claude, opencode): an agent started from scratch in a process
// group of its own, its output logged a record per line with its secrets
// redacted, stopped with SIGTERM then SIGKILL to the whole group, and the
// private files a driver hands it its token in.
package agentproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"time"
)

// Spec is what to start.
type Spec struct {
	Path string   // the command, resolved (see Config.Resolve)
	Args []string // never a secret: argv is readable by every local user
	Dir  string   // working directory; "" is the runtime's
	Env  []string // the whole environment (see Env)
	// Logger gets stderr, and stdout unless Stdio, a record per line
	// ("provider output", with stream and line).
	Logger *slog.Logger
	// Stdio gives the caller the process's stdin (Proc.Stdin) and stdout
	// (Proc.Stdout) for a protocol of its own; the caller closes Stdout.
	Stdio bool
	// Redact lists strings replaced by "[redacted]" in every logged line.
	Redact []string
}

// Proc is a started process.
type Proc struct {
	Stdin  io.WriteCloser // nil unless Spec.Stdio
	Stdout io.ReadCloser  // nil unless Spec.Stdio; the caller closes it

	cmd     *exec.Cmd
	logger  *slog.Logger
	out     *output
	done    chan struct{}
	waitErr error
}

// Start starts the process as the leader of a new process group. When it
// exits, whatever is left of its group is killed and it is reaped; Done is
// closed after that.
func Start(s Spec) (*Proc, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	logger := s.Logger
	if logger == nil {
		logger = slog.Default()
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // never the runtime's own environment
	}
	p := &Proc{cmd: cmd, logger: logger, done: make(chan struct{})}
	var stdinR, stdinW *os.File
	if s.Stdio {
		var err error
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("start %s: %w", s.Path, err)
		}
		cmd.Stdin = stdinR
	}
	out, err := newOutput(logger, cmd, s.Stdio, s.Redact)
	if err != nil {
		closeFiles(stdinR, stdinW)
		return nil, fmt.Errorf("start %s: %w", s.Path, err)
	}
	p.out = out
	if s.Stdio {
		p.Stdin, p.Stdout = stdinW, out.readers[0]
	}
	setGroup(cmd)
	err = cmd.Start()
	out.started()
	closeFiles(stdinR) // the process's end
	if err != nil {
		out.drain()
		if s.Stdio {
			closeFiles(stdinW, out.readers[0])
		}
		return nil, fmt.Errorf("start %s: %w", s.Path, err)
	}
	go p.wait()
	return p, nil
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

func (p *Proc) wait() {
	err := p.cmd.Wait()
	killGroup(p.cmd) // no child outlives its leader
	p.out.drain()
	p.waitErr = err
	close(p.done)
}

// Pid is the process id (and process group id).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process exited, its group was killed and its
// logged output drained.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the process exited (nil: status 0). Call it after Done.
func (p *Proc) Err() error { return p.waitErr }

// Status is Err as text, "exit status 0" for a clean exit.
func (p *Proc) Status() string {
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// Tail is the last few stderr lines, joined by " | " ("" if none), for
// error messages.
func (p *Proc) Tail() string { return p.out.stderr.tail() }

// Redact adds a secret (a rotated token) that is hidden from every line
// logged from now on.
func (p *Proc) Redact(secret string) {
	p.out.stdout.hide(secret)
	p.out.stderr.hide(secret)
}

// ErrKilled is what Stop reports for a process that outlived its grace.
var ErrKilled = errors.New("did not stop on SIGTERM: killed")

// Stop ends the process: stdin closed, SIGTERM to its group, SIGKILL once
// grace passed or ctx is done (logged as a warning). It returns once the process is reaped:
// ErrKilled if it took the SIGKILL, nil otherwise.
func (p *Proc) Stop(ctx context.Context, grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if p.Stdin != nil {
		p.Stdin.Close()
	}
	signalGroup(p.cmd, sigTerm)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	p.logger.Warn("provider process did not stop on SIGTERM; killing", "pid", p.Pid())
	killGroup(p.cmd)
	<-p.done // SIGKILL cannot be ignored
	return ErrKilled
}
