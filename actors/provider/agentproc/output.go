package agentproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// drainDelay bounds how long output is still copied once the process has
// exited and its group was killed.
const drainDelay = time.Second

// output copies a process's stdout and stderr into line loggers through
// pipes of its own rather than through exec.Cmd's copying, so that Wait
// returns as soon as the process exits even when a child of it still holds
// the pipes (the child is then killed with the group).
type output struct {
	stdout, stderr *lineLogger
	stdio          bool       // stdout's read end is the caller's, not logged
	readers        []*os.File // read ends, ours
	writers        []*os.File // write ends, the process's
	copying        sync.WaitGroup
}

// newOutput creates the pipes and sets them as cmd's stdout and stderr.
// With stdio, stdout is not logged: its read end is the caller's (out.own).
func newOutput(logger *slog.Logger, cmd *exec.Cmd, stdio bool, redact []string) (*output, error) {
	o := &output{stdout: newLineLogger(logger, "stdout", redact), stderr: newLineLogger(logger, "stderr", redact), stdio: stdio}
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			o.closeAll()
			return nil, err
		}
		o.readers, o.writers = append(o.readers, r), append(o.writers, w)
	}
	cmd.Stdout, cmd.Stderr = o.writers[0], o.writers[1]
	return o, nil
}

// started is called after cmd.Start, whether it worked or not: the write
// ends now belong to the process, and copying begins.
func (o *output) started() {
	for _, w := range o.writers {
		w.Close()
	}
	o.writers = nil
	for i, l := range []*lineLogger{o.stdout, o.stderr} {
		if i == 0 && o.stdio {
			continue // the caller reads it
		}
		r := o.readers[i]
		o.copying.Add(1)
		go func() {
			defer o.copying.Done()
			_, _ = io.Copy(l, r) // ends at EOF, or when drain closes r
		}()
	}
}

// drain waits for the copying to reach the end of the output, at most
// drainDelay, then closes the pipes and logs any last unterminated lines.
func (o *output) drain() {
	done := make(chan struct{})
	go func() {
		o.copying.Wait()
		close(done)
	}()
	t := time.NewTimer(drainDelay)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		o.closeAll() // unblocks the copiers
		<-done
	}
	o.closeAll()
	o.stdout.flush()
	o.stderr.flush()
}

func (o *output) closeAll() {
	for i, f := range append(o.readers, o.writers...) {
		if i == 0 && o.stdio {
			continue // the caller's read end: the caller closes it
		}
		f.Close() // a second Close only returns an error
	}
}

// Bounds of the output logger.
const (
	maxLine   = 4096 // longer lines are cut, marked with "…"
	tailLines = 8    // stderr lines kept for error messages
)

// lineLogger is an io.Writer that logs each line a process writes, one
// record per line, and keeps the last few for error messages.
type lineLogger struct {
	logger *slog.Logger
	stream string

	mu     sync.Mutex // guards the fields below
	redact []string   // replaced by "[redacted]" before a line is logged
	buf    []byte
	skip   bool // the current line was cut: drop the rest of it
	last   []string
}

func newLineLogger(logger *slog.Logger, stream string, redact []string) *lineLogger {
	return &lineLogger{logger: logger, stream: stream, redact: slices.Clone(redact)}
}

// hide adds a string that is replaced by "[redacted]" in every later line.
func (l *lineLogger) hide(secret string) {
	if secret == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.redact = append(l.redact, secret)
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !l.skip {
				l.buf = append(l.buf, p...)
				if len(l.buf) > maxLine {
					l.emit()
					l.skip = true
				}
			}
			break
		}
		if !l.skip {
			l.buf = append(l.buf, p[:i]...)
			l.emit()
		}
		l.skip = false
		p = p[i+1:]
	}
	return n, nil
}

// flush logs a last line without its newline.
func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit()
	}
}

func (l *lineLogger) emit() {
	line := l.buf
	cut := len(line) > maxLine
	if cut {
		line = line[:maxLine]
		// Do not split the last rune: drop up to 3 bytes of an incomplete one.
		for i := 0; i < utf8.UTFMax-1 && len(line) > 0; i++ {
			if r, size := utf8.DecodeLastRune(line); r != utf8.RuneError || size != 1 {
				break
			}
			line = line[:len(line)-1]
		}
	}
	text := strings.TrimRight(string(line), "\r")
	for _, secret := range l.redact {
		text = strings.ReplaceAll(text, secret, "[redacted]")
	}
	if cut {
		text += "…"
	}
	l.buf = l.buf[:0]
	l.logger.Info("provider output", "stream", l.stream, "line", text)
	l.last = append(l.last, text)
	if len(l.last) > tailLines {
		l.last = l.last[1:]
	}
}

// tail returns the last lines, joined by " | ".
func (l *lineLogger) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) == 0 {
		return ""
	}
	return strings.Join(l.last, " | ")
}

// ReadLine reads one line of an agent's protocol from br, without its
// newline; a line longer than max bytes is an error (the agent's output
// is bounded like any input), the end of the output io.EOF.
func ReadLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("a line longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}
