package session

import (
	"errors"
	"sync"
)

// ErrUnknownStream is the answer of Streams.Resume for a stream the
// session does not have, or an event it never sent: the endpoint answers
// it as it answers an unknown session.
var ErrUnknownStream = errors.New("unknown stream")

// StreamLimits bound what one session keeps of its streams' events.
type StreamLimits struct {
	Events int // events kept in all of the session's streams
	Bytes  int // their data's bytes
}

// Streams are the SSE streams of one session the endpoint may still have
// to deliver — each POST's response stream once it is an event stream, and
// the standalone GET stream — and their events, kept until their stream was
// delivered to completion so that a client that lost its connection can
// resume it (GET with Last-Event-ID, 2025-11-25 resumable streams). Each
// stream has an id unique in the session; its events are numbered from 1
// (0 is the priming event, which carries no data). What is kept is bounded
// per session by StreamLimits: past them the oldest event of the session
// goes, whichever its stream, the newest one always stays; an event that
// goes before it was delivered is counted as dropped.
//
// A stream is delivered by its writer: the POST's own connection, written
// by the request's goroutine, which tells Complete once the response went
// out; or, once it resumed, a Reader (a GET), whose goroutine waits for
// the events the stream gets. The zero value is ready and holds nothing: a
// session that never streamed allocates nothing here. It is shared by the
// HTTP path and the session's actor, which closes it as the session ends.
type Streams struct {
	limits *StreamLimits // the endpoint's, set by the Table at Reserve

	mu      sync.Mutex         // guards the fields below
	last    uint32             // the last stream id issued
	streams map[uint32]*Stream // not delivered to completion; nil while none
	events  int                // kept in all of them
	bytes   int
	stamp   uint64 // orders events across streams, for eviction
	dropped uint64 // events that went before they were delivered
	closed  bool   // the session ended
}

// Stream is one SSE stream of a session.
type Stream struct {
	ss         *Streams
	id         uint32
	standalone bool

	// Guarded by ss.mu.
	seq    uint32  // the last event's number
	kept   []Event // oldest first
	final  bool    // the last event, the response, is kept: nothing follows
	gone   bool    // delivered to completion, or the session ended
	reader *Reader // the GET delivering it, if any
}

// Event is one event of a stream.
type Event struct {
	Seq  uint32
	Data []byte // the JSON-RPC message; shared, read-only
	// Check, if set, is a resource URI the reader's principal must still be
	// allowed to read when the event is delivered (resources/updated).
	Check string
	stamp uint64
}

// Reader is a connection delivering a stream from an event on: a GET that
// resumed it, or the standalone stream's GET.
type Reader struct {
	s     *Stream
	after uint32        // delivered up to this event; guarded by ss.mu
	wake  chan struct{} // one pending wake-up: the stream got events, or the reader must stop
	gone  bool          // replaced, or the stream ended; guarded by ss.mu
}

// Open starts a stream: standalone for the GET stream, else a POST's. A
// new standalone stream replaces a previous one no reader delivers (its
// client did not resume it). It fails with ErrClosed once the session ended.
func (ss *Streams) Open(standalone bool) (*Stream, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, ErrClosed
	}
	if standalone {
		for _, s := range ss.streams {
			if s.standalone && s.reader == nil {
				ss.removeLocked(s)
			}
		}
	}
	if ss.streams == nil {
		ss.streams = map[uint32]*Stream{}
	}
	ss.last++
	s := &Stream{ss: ss, id: ss.last, standalone: standalone}
	ss.streams[s.id] = s
	return s, nil
}

// ID returns the stream's id in its session.
func (s *Stream) ID() uint32 { return s.id }

// Standalone reports whether the stream is the session's GET stream.
func (s *Stream) Standalone() bool { return s.standalone }

// Append keeps an event with data and returns its number; final marks the
// request's response, after which the stream gets nothing more. A reader
// is woken. A stream that ended keeps nothing (the number is still
// returned).
func (s *Stream) Append(data []byte, final bool, check string) uint32 {
	s.ss.mu.Lock()
	defer s.ss.mu.Unlock()
	return s.appendLocked(data, final, check)
}

func (s *Stream) appendLocked(data []byte, final bool, check string) uint32 {
	ss := s.ss
	s.seq++
	if s.gone || s.final {
		return s.seq
	}
	ss.stamp++
	s.kept = append(s.kept, Event{Seq: s.seq, Data: data, Check: check, stamp: ss.stamp})
	s.final = final
	ss.events++
	ss.bytes += len(data)
	for ss.events > 1 && (ss.events > ss.limits.Events || ss.bytes > ss.limits.Bytes) {
		ss.evictOldestLocked()
	}
	if s.reader != nil {
		s.reader.signal()
	}
	return s.seq
}

// evictOldestLocked removes the session's oldest kept event.
func (ss *Streams) evictOldestLocked() {
	var oldest *Stream
	for _, s := range ss.streams {
		if len(s.kept) > 0 && (oldest == nil || s.kept[0].stamp < oldest.kept[0].stamp) {
			oldest = s
		}
	}
	ev := oldest.kept[0]
	oldest.kept[0] = Event{}
	oldest.kept = oldest.kept[1:]
	ss.events--
	ss.bytes -= len(ev.Data)
	if oldest.reader == nil || ev.Seq > oldest.reader.after {
		ss.dropped++
	}
}

// Complete tells that the stream was delivered to completion (its response
// went out on a live connection), or ended without one (a cancelled
// request): it and its events go, and a reader stops.
func (s *Stream) Complete() {
	ss := s.ss
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.removeLocked(s)
}

func (ss *Streams) removeLocked(s *Stream) {
	if s.gone {
		return
	}
	s.gone = true
	for _, ev := range s.kept {
		ss.bytes -= len(ev.Data)
	}
	ss.events -= len(s.kept)
	s.kept = nil
	if s.reader != nil {
		s.reader.gone = true
		s.reader.signal()
		s.reader = nil
	}
	delete(ss.streams, s.id)
	if len(ss.streams) == 0 {
		ss.streams = nil // an idle session holds nothing
	}
}

// Resume attaches a reader to stream id from the event after on (the
// Last-Event-ID's); it replaces a reader that delivered it before (a
// client resumes when it lost the connection, which the server may not
// have noticed yet). It fails with ErrUnknownStream for a stream the
// session does not have, or an event it has not sent yet.
func (ss *Streams) Resume(id, after uint32) (*Reader, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.streams[id]
	if ss.closed || s == nil || after > s.seq {
		return nil, ErrUnknownStream
	}
	return s.attachLocked(after), nil
}

// StreamKind is what a session knows of a stream id.
type StreamKind uint8

const (
	StreamUnknown    StreamKind = iota // never issued by the session
	StreamGone                         // issued, no longer kept: delivered, or dropped
	StreamPost                         // a POST's stream, kept
	StreamStandalone                   // the standalone stream, kept
)

// Kind returns what the session knows of stream id.
func (ss *Streams) Kind(id uint32) StreamKind {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch s := ss.streams[id]; {
	case s != nil && s.standalone:
		return StreamStandalone
	case s != nil:
		return StreamPost
	case id != 0 && id <= ss.last:
		return StreamGone
	}
	return StreamUnknown
}

// Attach attaches a reader to a stream just opened: the standalone
// stream's GET.
func (s *Stream) Attach() *Reader {
	s.ss.mu.Lock()
	defer s.ss.mu.Unlock()
	return s.attachLocked(s.seq)
}

func (s *Stream) attachLocked(after uint32) *Reader {
	if old := s.reader; old != nil {
		old.gone = true
		old.signal()
	}
	r := &Reader{s: s, after: after, wake: make(chan struct{}, 1)}
	if s.gone {
		r.gone = true
	} else {
		s.reader = r
	}
	return r
}

// Stream returns the stream the reader delivers.
func (r *Reader) Stream() *Stream { return r.s }

func (r *Reader) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Next returns the events the reader has not delivered, whether the last
// of them is the stream's response, whether the reader must stop (it was
// replaced, the stream ended or the session did), and the channel that
// tells when to call Next again.
func (r *Reader) Next() (events []Event, final, stop bool, wake <-chan struct{}) {
	ss := r.s.ss
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i, ev := range r.s.kept {
		if ev.Seq > r.after {
			events = append(events, r.s.kept[i:]...)
			break
		}
	}
	return events, r.s.final && len(events) > 0 && events[len(events)-1].Seq == r.s.seq, r.gone, r.wake
}

// Delivered records that the reader delivered the events up to seq. The
// stream's response delivered, the stream is complete. The standalone
// stream keeps nothing it delivered: its notifications are hints a client
// that lost its connection re-reads the state for, and holding them for a
// replay would cost every session with an open stream its whole buffer.
func (r *Reader) Delivered(seq uint32) {
	ss := r.s.ss
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if r.gone {
		return
	}
	r.after = seq
	switch s := r.s; {
	case s.final && seq == s.seq:
		ss.removeLocked(s)
	case s.standalone:
		n := 0
		for n < len(s.kept) && s.kept[n].Seq <= seq {
			ss.bytes -= len(s.kept[n].Data)
			s.kept[n] = Event{}
			n++
		}
		ss.events -= n
		s.kept = s.kept[n:]
	}
}

// Detach ends the reader: its connection is over. A POST's stream stays,
// to be resumed; so does the standalone stream while it keeps events its
// client has not had, and otherwise goes.
func (r *Reader) Detach() {
	ss := r.s.ss
	ss.mu.Lock()
	defer ss.mu.Unlock()
	r.gone = true
	if r.s.reader != r {
		return
	}
	r.s.reader = nil
	if r.s.standalone && len(r.s.kept) == 0 {
		ss.removeLocked(r.s)
	}
}

// Notify appends an event to the session's standalone stream if a reader
// delivers it now, and reports whether it did: notifications for the
// client (list changes, resource updates) go only to an open stream.
// dropped is the session's count of events that went undelivered, if this
// one pushed one out (the reader is slower than what comes), else 0.
func (ss *Streams) Notify(data []byte, check string) (sent bool, dropped uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, s := range ss.streams {
		if s.standalone && s.reader != nil {
			before := ss.dropped
			s.appendLocked(data, false, check)
			if ss.dropped != before {
				dropped = ss.dropped
			}
			return true, dropped
		}
	}
	return false, 0
}

// Kept returns how many events and bytes the session keeps, and how many
// events went before they were delivered.
func (ss *Streams) Kept() (events, bytes int, dropped uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.events, ss.bytes, ss.dropped
}

// Len returns how many streams the session keeps.
func (ss *Streams) Len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.streams)
}

// close drops every stream and stops their readers: the session ended.
func (ss *Streams) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for _, s := range ss.streams {
		ss.removeLocked(s)
	}
}
