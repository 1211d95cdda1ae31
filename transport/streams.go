package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/agenthost/mcpruntime/actors/session"
)

// Resumable streams (MCP 2025-11-25, SEP-1699). Every SSE stream of a
// session — a POST's response once it streams, the standalone GET stream —
// has an id in the session (session.Streams), and every event an id that
// names its stream and its place in it, "<stream>.<seq>" (opaque to
// clients). On a session negotiated at 2025-11-25 a stream opens with a
// priming event (an id, empty data) carrying the retry field, so that a
// client whose connection ends — or whose stream the server ended,
// Output.CloseStream — comes back with GET and Last-Event-ID; the events
// that followed are replayed from the session's buffer and the stream goes
// on on that GET (the rest of a POST's stream: its response). Earlier
// versions get ids and resumption too, but no priming event (their clients
// may not expect an event without data) and no CloseStream.

const headerLastEventID = "Last-Event-Id" // Last-Event-ID, canonical

// sseRetry is the reconnection delay a resumable stream asks of its
// client, the retry field of its priming event: a second.
const sseRetry = "retry: 1000\n"

// resumable reports whether a session negotiated at version gets priming
// events and Output.CloseStream (2025-11-25 and later).
func resumable(version string) bool { return version >= "2025-11-25" }

// appendEventID appends "<stream>.<seq>".
func appendEventID(b []byte, stream, seq uint32) []byte {
	b = strconv.AppendUint(b, uint64(stream), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(seq), 10)
}

// parseEventID reads a Last-Event-ID the endpoint wrote: "<stream>.<seq>",
// both decimal without sign or leading zeros, the stream at least 1, both
// within 32 bits. Anything else is not an id of this endpoint.
func parseEventID(s string) (stream, seq uint32, ok bool) {
	dot := -1
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			dot = i
			break
		}
	}
	if dot < 0 {
		return 0, 0, false
	}
	a, okA := parseUint32(s[:dot])
	b, okB := parseUint32(s[dot+1:])
	if !okA || !okB || a == 0 {
		return 0, 0, false
	}
	return a, b, true
}

// parseUint32 reads a decimal without sign or leading zeros ("0" itself
// allowed) that fits 32 bits.
func parseUint32(s string) (uint32, bool) {
	if s == "" || len(s) > 10 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 1<<32-1 {
		return 0, false
	}
	return uint32(n), true
}

// appendEvent appends one SSE event: its id, then the JSON-RPC message.
func appendEvent(b []byte, stream, seq uint32, data []byte) []byte {
	b = append(b, "id: "...)
	b = appendEventID(b, stream, seq)
	b = append(b, "\nevent: message\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// appendPriming appends a stream's first event on a resumable session: the
// retry field and the priming event (the stream's id 0, empty data).
func appendPriming(b []byte, stream uint32) []byte {
	b = append(b, sseRetry...)
	b = append(b, "id: "...)
	b = appendEventID(b, stream, 0)
	return append(b, "\ndata:\n\n"...)
}

// handleGet opens the session's standalone SSE stream, or resumes one of
// its streams from the event after the Last-Event-ID.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if s.modernStream(w, r) {
		return
	}
	p, e, ok := s.admit(w, r)
	if !ok {
		return
	}
	if v, ok := headerVersion(r); !ok {
		s.failVersion(w, nil, v)
		return
	}
	if !accepts(r, "text/event-stream") {
		s.fail(w, failAcceptGet)
		return
	}
	if e == nil {
		s.fail(w, failStreamNoSession)
		return
	}
	last := r.Header.Values(headerLastEventID)
	resume := len(last) > 0
	var id, after uint32
	if resume {
		// An id this endpoint did not write, or of a stream the session
		// never had, is answered as an unknown session is: a client cannot
		// tell a stream of another session from one that never was (and
		// another namespace's session is already that 404). A stream the
		// session had and no longer keeps — it was delivered, or its events
		// went — has nothing to replay: the GET opens a new standalone
		// stream, as one without Last-Event-ID does.
		var ok bool
		if id, after, ok = parseEventID(last[0]); !ok || len(last) != 1 {
			s.fail(w, failUnknownSession)
			return
		}
		switch e.Streams().Kind(id) {
		case session.StreamUnknown:
			s.fail(w, failUnknownSession)
			return
		case session.StreamGone:
			resume = false
		case session.StreamPost:
			rd, err := e.Streams().Resume(id, after)
			if err != nil {
				s.fail(w, failUnknownSession)
				return
			}
			s.deliver(w, r, p, e, rd, false)
			return
		}
	}
	// The standalone stream registers its cancel in the session's Calls:
	// the session's actor ends it (CloseStream, the session's end); one at
	// a time.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	switch err := e.OpenStream(cancel); {
	case errors.Is(err, session.ErrStreamBusy):
		s.fail(w, failStreamOpen)
		return
	case err != nil:
		s.fail(w, failUnknownSession) // ended between the owner check and now
		return
	}
	defer e.EndStream()
	var rd *session.Reader
	if resume {
		var err error
		if rd, err = e.Streams().Resume(id, after); err != nil {
			s.fail(w, failUnknownSession)
			return
		}
	} else {
		st, err := e.Streams().Open(true)
		if err != nil {
			s.fail(w, failUnknownSession) // ended between the owner check and now
			return
		}
		rd = st.Attach()
	}
	s.deliver(w, r.WithContext(ctx), p, e, rd, !resume)
}

// deliver answers a GET with the events of rd's stream, as they come,
// until the stream is complete (a POST's response went out), the client
// goes, the credential the GET was made with dies, the reader is replaced
// or the session ends. prime: the stream is new, and opens with its
// priming event. An event that says which resource it is about goes out
// only if the GET's principal may still read it (resources/updated).
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, rd *session.Reader, prime bool) {
	defer rd.Detach()
	e.Begin(s.opts.Now())
	defer func() { e.End(s.opts.Now()) }()
	// The credential is watched before the stream starts, then the node's
	// availability checked: a node that stopped serving before the watch
	// (CloseStreamsUnavailable did not see it) opens no stream.
	dead := make(chan struct{})
	defer s.live.WatchCredential(p.CredentialID, func() { close(dead) })()
	if !s.available() {
		s.fail(w, failUnavailable)
		return
	}
	startEventStream(w)
	rc := http.NewResponseController(w)
	var b []byte
	stream := rd.Stream().ID()
	if resumable(e.Version()) {
		if prime {
			b = appendPriming(b, stream)
		} else {
			b = append(b, sseRetry+"\n"...)
		}
	}
	if _, err := w.Write(b); err != nil || rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(s.opts.KeepAlive)
	defer tick.Stop()
	for {
		events, final, stop, wake := rd.Next()
		if stop {
			return
		}
		if len(events) > 0 {
			b = b[:0]
			for _, ev := range events {
				if ev.Check == "" || s.backend.CanRead(p.Principal, ev.Check) {
					b = appendEvent(b, stream, ev.Seq, ev.Data)
				}
			}
			if _, err := w.Write(b); err != nil || rc.Flush() != nil {
				return
			}
			rd.Delivered(events[len(events)-1].Seq)
			if final {
				return
			}
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		case <-dead:
			return
		case <-tick.C:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
