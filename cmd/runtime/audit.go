package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// auditSink is --audit-file: it follows the runtime's journal (SPEC §3.7)
// and appends each audit record to the file as a JSON line. It reads the
// journal as the event stream does, so it never slows a call: a sink that
// falls behind the journal's bound (a slow disk) loses the records it
// missed, counts them in runtime_audit_dropped_total and warns. reopen
// (SIGHUP) closes the file and opens the path again, for log rotation. The
// sink ends once the runtime has closed and it has written every record
// the journal still held.
type auditSink struct {
	path    string
	log     *slog.Logger
	rt      *mcpruntime.Runtime
	reopen  <-chan os.Signal
	stop    chan struct{} // closed by abandon: end without draining
	done    chan struct{} // closed when the sink has ended
	f       *os.File
	w       *bufio.Writer
	written prometheus.Counter
	dropped prometheus.Counter
}

// auditBatch is how many records one read of the journal takes.
const auditBatch = 512

// openAuditFile opens path for appending, creating it 0600.
func openAuditFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--audit-file: %w", err)
	}
	return f, nil
}

// newAuditSink opens the file (so a bad path fails the start) and
// registers the sink's counters.
func newAuditSink(path string, rt *mcpruntime.Runtime, reg prometheus.Registerer, reopen <-chan os.Signal, log *slog.Logger) (*auditSink, error) {
	f, err := openAuditFile(path)
	if err != nil {
		return nil, err
	}
	a := &auditSink{
		path: path, log: log, rt: rt, reopen: reopen, f: f, w: bufio.NewWriterSize(f, 64<<10),
		stop: make(chan struct{}), done: make(chan struct{}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "runtime_audit_records_written_total", Help: "Audit records appended to --audit-file."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "runtime_audit_dropped_total", Help: "Journal records the --audit-file sink missed because it fell behind the journal's bound (audit records among them are lost)."}),
	}
	reg.MustRegister(a.written, a.dropped)
	return a, nil
}

// run follows the journal from its start until the runtime closes.
func (a *auditSink) run() {
	defer close(a.done)
	defer a.closeFile()
	var pos uint64
	for {
		page, err := a.rt.Records(pos, auditBatch)
		if errors.Is(err, mcpruntime.ErrClosed) {
			return // closed, and nothing left
		}
		if page.Oldest > pos+1 {
			missed := page.Oldest - 1 - pos
			a.dropped.Add(float64(missed))
			a.log.Warn("audit file sink fell behind the journal: records lost", "from", pos+1, "to", page.Oldest-1, "count", missed)
		}
		for _, rec := range page.Records {
			pos = rec.ID
			if strings.HasPrefix(rec.Kind, "audit.") {
				a.write(&rec)
			}
		}
		if len(page.Records) == auditBatch {
			continue
		}
		a.flush()
		select {
		case <-page.Next:
		case <-a.reopen:
			a.reopenFile()
		case <-a.stop:
			return
		}
	}
}

func (a *auditSink) write(rec *mcpruntime.Record) {
	b, err := json.Marshal(rec)
	if err == nil {
		b = append(b, '\n')
		_, err = a.w.Write(b)
	}
	if err != nil {
		a.log.Error("audit file write", "path", a.path, "err", err)
		return
	}
	a.written.Inc()
}

func (a *auditSink) flush() {
	if err := a.w.Flush(); err != nil {
		a.log.Error("audit file write", "path", a.path, "err", err)
		a.w.Reset(a.f) // what did not fit is lost; the next records still go
	}
}

// reopenFile closes the file and opens its path again: after a rotation
// moved it, records go to a new file. If the path cannot be opened the old
// file is kept.
func (a *auditSink) reopenFile() {
	a.flush()
	f, err := openAuditFile(a.path)
	if err != nil {
		a.log.Error("audit file reopen: keeping the old file", "path", a.path, "err", err)
		return
	}
	old := a.f
	a.f = f
	a.w.Reset(f)
	if err := old.Close(); err != nil {
		a.log.Error("audit file close", "path", a.path, "err", err)
	}
	a.log.Info("audit file reopened", "path", a.path)
}

func (a *auditSink) closeFile() {
	a.flush()
	if err := a.f.Sync(); err != nil {
		a.log.Error("audit file sync", "path", a.path, "err", err)
	}
	if err := a.f.Close(); err != nil {
		a.log.Error("audit file close", "path", a.path, "err", err)
	}
}

// wait waits for the sink to write what the closed runtime's journal held.
func (a *auditSink) wait() { <-a.done }

// abandon ends the sink after a failed start, without draining.
func (a *auditSink) abandon() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}
