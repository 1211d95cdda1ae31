package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"
)

// The event stream, GET /admin/v1/events: the provider journal
// (Runtime.ProviderRecords) as Server-Sent Events, one event per record —
// "id: <record id>", "event: <kind>", "data: <the record as JSON>" — from
// the record after Last-Event-ID (or ?after=N; neither: only what comes
// next), filtered by ?thread= and ?instance=. A reader that fell behind the
// journal's bound first gets an event "gap" saying which ids it missed.
// Comments keep an idle stream alive. The stream ends when the client goes
// or the runtime closes.

// Bounds of the event stream.
const (
	// DefaultMaxEventStreams is Options.MaxEventStreams when zero.
	DefaultMaxEventStreams = 16
	// eventBatch is how many records one read of the journal takes.
	eventBatch = 256
	// keepAlive is the interval of the comments on an idle stream.
	keepAlive = 15 * time.Second
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
	after, thread, instance, err := eventQuery(r)
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
	page, err := s.rt.ProviderRecords(0, 1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if after == nil { // only what comes next
		after = &page.Newest
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()

	pos := *after
	ticker := time.NewTicker(keepAlive)
	defer ticker.Stop()
	for {
		page, err := s.rt.ProviderRecords(pos, eventBatch)
		if err != nil {
			return // closed
		}
		if page.Oldest > pos+1 {
			if !writeEvent(w, "", "gap", gapJSON{From: pos + 1, To: page.Oldest - 1}) {
				return
			}
			pos = page.Oldest - 1
		}
		for _, rec := range page.Records {
			pos = rec.ID
			if (thread != "" && rec.Thread != thread) || (instance != "" && rec.Instance != instance) {
				continue
			}
			if !writeEvent(w, strconv.FormatUint(rec.ID, 10), rec.Kind, rec) {
				return
			}
		}
		fl.Flush()
		if len(page.Records) == eventBatch {
			continue
		}
		select {
		case <-page.Next:
		case <-ticker.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case <-r.Context().Done():
			return
		}
	}
}

// writeEvent writes one SSE event; false once the client is gone.
func writeEvent(w http.ResponseWriter, id, kind string, v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		return false
	}
	if id != "" {
		if _, err := fmt.Fprintf(w, "id: %s\n", id); err != nil {
			return false
		}
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, data)
	return err == nil
}

// eventQuery reads where a stream starts (Last-Event-ID, else ?after=;
// nil: only what comes next) and its filters.
func eventQuery(r *http.Request) (after *uint64, thread, instance string, err error) {
	q := r.URL.Query()
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = q.Get("after")
	}
	if from != "" {
		n, perr := strconv.ParseUint(from, 10, 64)
		if perr != nil {
			return nil, "", "", invalidRequest("Last-Event-ID / after must be a record id (a decimal number)")
		}
		after = &n
	}
	thread, instance = q.Get("thread"), q.Get("instance")
	for _, v := range []string{thread, instance} {
		if len(v) > 256 {
			return nil, "", "", invalidRequest("thread and instance filters are ids of at most 256 bytes")
		}
	}
	return after, thread, instance, nil
}
