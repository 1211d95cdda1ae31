package execdriver

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"
)

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

	mu   sync.Mutex // guards buf and last
	buf  []byte
	last []string
}

func newLineLogger(logger *slog.Logger, stream string) *lineLogger {
	return &lineLogger{logger: logger, stream: stream}
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			if len(l.buf) > maxLine {
				l.emit()
			}
			break
		}
		l.buf = append(l.buf, p[:i]...)
		l.emit()
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

// tail returns the last lines, formatted for the end of an error message.
func (l *lineLogger) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) == 0 {
		return ""
	}
	return "; stderr: " + strings.Join(l.last, " | ")
}
