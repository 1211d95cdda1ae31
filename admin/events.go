package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The event stream, GET /admin/v1/events: the journal
// (Runtime.Records) as Server-Sent Events, one event per record —
// "id: <record id>", "event: <kind>", "data: <the record as JSON>" — from
// the record after Last-Event-ID (or ?after=N; neither: only what comes
// next), filtered by ?thread=, ?instance= and ?kind= (kinds or families,
// comma-separated). With ?follow=false the stream ends once it has sent
// the records the journal held when it was asked for. A reader that asks for records the journal's bound
// already dropped first gets an event "gap" saying which ids it missed; a
// reader that falls that far behind while streaming gets a last event
// "dropped" and the stream ends, and one whose writes stall for
// writeStall is cut off: a slow reader never slows the runtime, whose
// appends never wait. Comments keep an idle stream alive. The stream ends
// when the client goes or the runtime closes.

// Bounds of the event stream.
const (
	// DefaultMaxEventStreams is Options.MaxEventStreams when zero.
	DefaultMaxEventStreams = 16
	// eventBatch is how many records one read of the journal takes.
	eventBatch = 256
	// keepAlive is the interval of the comments on an idle stream.
	keepAlive = 15 * time.Second
	// writeStall is how long one write to a reader may take before the
	// stream is cut off.
	writeStall = 10 * time.Second
	// eventLinger is how long a stream waits, once a record arrived after
	// it caught up, before it reads the journal again: under load records
	// come many a millisecond, and one read, write and flush then carries
	// all that came meanwhile, not one each. An event is that much later.
	eventLinger = 5 * time.Millisecond
	// maxKinds bounds the ?kind= filter's entries, maxKindLen each one.
	maxKinds, maxKindLen = 32, 64
)

var errTooManyStreams = &apiError{http.StatusServiceUnavailable, CodeUnavailable, "too many event streams open; retry later"}

// gapJSON is the data of a "gap" event.
type gapJSON struct {
	From uint64 `json:"from"` // the first id missed
	To   uint64 `json:"to"`   // the last id missed
}

func (s *Server) events(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if !s.authenticate(w, r) {
		return
	}
	after, f, err := eventQuery(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		s.writeError(w, r, errTooManyStreams)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		s.writeError(w, r, errInternal)
		return
	}
	page, err := s.rt.Records(0, 1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if after == nil { // only what comes next
		after = &page.Newest
	}
	until := page.Newest // with follow=false: the last record sent
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()

	rc := http.NewResponseController(w)
	pos := *after
	ticker := time.NewTicker(keepAlive)
	defer ticker.Stop()
	linger := time.NewTimer(eventLinger)
	defer linger.Stop()
	ev := newEventWriter(w)
	var records []mcpruntime.Record // one batch's, the array reused
	for first := true; ; first = false {
		page, err := s.rt.RecordsInto(records, pos, eventBatch)
		if err != nil {
			return // closed
		}
		records = page.Records
		_ = rc.SetWriteDeadline(time.Now().Add(writeStall)) // a server that cannot: no bound but the client's
		if page.Oldest > pos+1 {
			missed := gapJSON{From: pos + 1, To: page.Oldest - 1}
			if !first { // fell behind while streaming: dropped, it says so, and ends
				ev.write(0, "dropped", missed)
				fl.Flush()
				return
			}
			if !ev.write(0, "gap", missed) {
				return
			}
			pos = page.Oldest - 1
		}
		for i := range page.Records {
			rec := &page.Records[i]
			pos = rec.ID
			if !f.match(rec) {
				continue
			}
			if !ev.write(rec.ID, rec.Kind, rec) {
				return
			}
		}
		if rc.Flush() != nil {
			return
		}
		if !f.follow && pos >= until {
			return
		}
		if len(page.Records) == eventBatch {
			continue
		}
		select {
		case <-page.Next:
			linger.Reset(eventLinger)
			select {
			case <-linger.C:
			case <-r.Context().Done():
				return
			}
		case <-ticker.C:
			_ = rc.SetWriteDeadline(time.Now().Add(writeStall))
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// eventWriter writes a stream's SSE events, each built in one buffer,
// with one JSON encoder, both reused from event to event.
type eventWriter struct {
	w   http.ResponseWriter
	buf bytes.Buffer
	enc *json.Encoder
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	ew := &eventWriter{w: w}
	ew.enc = json.NewEncoder(&ew.buf)
	ew.enc.SetEscapeHTML(false)
	return ew
}

// write writes one event — its id (0: none), kind and v as its data —
// and reports false once the client is gone.
func (ew *eventWriter) write(id uint64, kind string, v any) bool {
	b := &ew.buf
	b.Reset()
	if id != 0 {
		b.WriteString("id: ")
		b.Write(strconv.AppendUint(b.AvailableBuffer(), id, 10))
		b.WriteByte('\n')
	}
	b.WriteString("event: ")
	b.WriteString(kind)
	b.WriteString("\ndata: ")
	if err := ew.enc.Encode(v); err != nil { // a line of JSON, and its newline
		return false
	}
	b.WriteByte('\n')
	_, err := ew.w.Write(b.Bytes())
	return err == nil
}

// eventFilter is what a stream keeps: every field set must match.
type eventFilter struct {
	thread, instance string
	follow           bool     // false: end once the records held at the start are sent
	kinds            []string // kinds ("credential.revoked") or families ("credential")
}

func (f *eventFilter) match(rec *mcpruntime.Record) bool {
	if (f.thread != "" && rec.Thread != f.thread) || (f.instance != "" && rec.Instance != f.instance) {
		return false
	}
	if len(f.kinds) == 0 {
		return true
	}
	for _, k := range f.kinds {
		if rec.Kind == k || (len(rec.Kind) > len(k) && rec.Kind[len(k)] == '.' && rec.Kind[:len(k)] == k) {
			return true
		}
	}
	return false
}

// eventQuery reads where a stream starts (Last-Event-ID, else ?after=;
// nil: only what comes next) and its filters.
func eventQuery(r *http.Request) (after *uint64, f eventFilter, err error) {
	q := r.URL.Query()
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = q.Get("after")
	}
	if from != "" {
		n, perr := strconv.ParseUint(from, 10, 64)
		if perr != nil {
			return nil, f, invalidRequest("Last-Event-ID / after must be a record id (a decimal number)")
		}
		after = &n
	}
	f.thread, f.instance = q.Get("thread"), q.Get("instance")
	f.follow = true
	if v := q.Get("follow"); v != "" {
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			return nil, f, invalidRequest("follow is true or false")
		}
		f.follow = b
	}
	for _, v := range []string{f.thread, f.instance} {
		if len(v) > 256 {
			return nil, f, invalidRequest("thread and instance filters are ids of at most 256 bytes")
		}
	}
	if k := q.Get("kind"); k != "" {
		f.kinds = strings.Split(k, ",")
		if len(f.kinds) > maxKinds {
			return nil, f, invalidRequest(fmt.Sprintf("kind takes at most %d kinds", maxKinds))
		}
		for _, k := range f.kinds {
			if !validKind(k) {
				return nil, f, invalidRequest(fmt.Sprintf("kind %q is not a record kind or family: lower-case letters, digits, '_' and '.', at most %d bytes", k, maxKindLen))
			}
		}
	}
	return after, f, nil
}

func validKind(k string) bool {
	if k == "" || len(k) > maxKindLen || k[0] == '.' || k[len(k)-1] == '.' {
		return false
	}
	for _, c := range []byte(k) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '.' {
			return false
		}
	}
	return true
}
