package transport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

var (
	errRequestsPerNamespace = errors.New("too many requests in flight for this credential")
	errRequests             = errors.New("too many requests in flight")
	errBodyBudget           = errors.New("too many request bytes in flight")
	errBodyTooLarge         = errors.New("body over the limit")
)

// nsShards is the number of shards of the per-namespace counts: enough
// that requests of different namespaces rarely share a lock.
const nsShards = 32

// limits bounds what POST requests hold while they run (SPEC §5 "also
// bounded"): requests in flight per namespace and in all, and the bytes of
// their bodies. It is on every request's path and off the mailboxes: two
// atomics and one sharded map, no allocation once a namespace's slot
// exists.
type limits struct {
	perNS    int
	requests int64
	budget   int64

	inFlight atomic.Int64 // requests admitted and not done
	bytes    atomic.Int64 // body bytes reserved
	shards   [nsShards]nsShard
}

type nsShard struct {
	mu sync.Mutex     // guards n
	n  map[string]int // requests in flight by namespace; no zero entries
}

func (l *limits) init(perNS, requests int, budget int64) {
	l.perNS, l.requests, l.budget = perNS, int64(requests), budget
	for i := range l.shards {
		l.shards[i].n = map[string]int{}
	}
}

func (l *limits) shard(namespace string) *nsShard { return &l.shards[nsHash(namespace)%nsShards] }

// nsHash is the FNV-1a hash of a namespace, which picks its shard.
func nsHash(namespace string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(namespace); i++ {
		h = (h ^ uint32(namespace[i])) * 16777619
	}
	return h
}

// admit takes a request slot for namespace: errRequestsPerNamespace when
// the namespace has perNS in flight, errRequests when the endpoint has
// requests in flight. On nil the caller calls done once the request ends.
func (l *limits) admit(namespace string) error {
	sh := l.shard(namespace)
	sh.mu.Lock()
	if sh.n[namespace] >= l.perNS {
		sh.mu.Unlock()
		return errRequestsPerNamespace
	}
	if l.inFlight.Add(1) > l.requests {
		l.inFlight.Add(-1)
		sh.mu.Unlock()
		return errRequests
	}
	sh.n[namespace]++
	sh.mu.Unlock()
	return nil
}

// done gives back the slot of a request that admit let in.
func (l *limits) done(namespace string) {
	sh := l.shard(namespace)
	sh.mu.Lock()
	if sh.n[namespace]--; sh.n[namespace] <= 0 {
		delete(sh.n, namespace)
	}
	sh.mu.Unlock()
	l.inFlight.Add(-1)
}

// admitMore takes n more slots for namespace, all of them or none, with
// admit's errors: those of a batch's requests beyond the one slot its POST
// holds (SPEC §5b.15). It never waits, so batches cannot deadlock on each
// other's slots, and it never overshoots the endpoint's count, even for a
// moment (a single request near the bound is not refused by a batch that
// does not fit).
func (l *limits) admitMore(namespace string, n int) error {
	if n <= 0 {
		return nil
	}
	sh := l.shard(namespace)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.n[namespace]+n > l.perNS {
		return errRequestsPerNamespace
	}
	for {
		held := l.inFlight.Load()
		if held+int64(n) > l.requests {
			return errRequests
		}
		if l.inFlight.CompareAndSwap(held, held+int64(n)) {
			break
		}
	}
	sh.n[namespace] += n
	return nil
}

// doneMore gives back the n slots admitMore took.
func (l *limits) doneMore(namespace string, n int) {
	if n <= 0 {
		return
	}
	sh := l.shard(namespace)
	sh.mu.Lock()
	if sh.n[namespace] -= n; sh.n[namespace] <= 0 {
		delete(sh.n, namespace)
	}
	sh.mu.Unlock()
	l.inFlight.Add(-int64(n))
}

// reserve takes n bytes of the body budget, or reports that they do not
// fit. Exact under concurrency: what is reserved never exceeds the budget.
func (l *limits) reserve(n int64) bool {
	for {
		held := l.bytes.Load()
		if held+n > l.budget {
			return false
		}
		if l.bytes.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

// release gives back n reserved bytes.
func (l *limits) release(n int64) { l.bytes.Add(-n) }

// readSized reads a body of a declared length n, reserving it up front.
// The bytes stay reserved until the caller releases them, when the request
// ends (its body is held until then).
func (l *limits) readSized(body io.Reader, n int64) ([]byte, int64, error) {
	if !l.reserve(n) {
		return nil, 0, errBodyBudget
	}
	buf := make([]byte, n)
	_, err := io.ReadFull(body, buf)
	return buf, n, err
}

// readUnsized reads a body of unknown length (chunked) of at most limit
// bytes, reserving room in the budget before the buffer grows, chunk by
// chunk; it returns what it reserved (the buffer's capacity) with any
// error. More than limit bytes is errBodyTooLarge.
func (l *limits) readUnsized(body io.Reader, limit int64) ([]byte, int64, error) {
	var buf []byte
	var held int64
	for {
		if len(buf) == cap(buf) {
			size := min(max(int64(cap(buf))*2, 512), limit+1)
			if size == int64(cap(buf)) {
				return buf, held, errBodyTooLarge // limit+1 bytes read
			}
			if !l.reserve(size - held) {
				return buf, held, errBodyBudget
			}
			held = size
			buf = append(make([]byte, 0, size), buf...)
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case int64(len(buf)) > limit:
			return buf, held, errBodyTooLarge
		case err == io.EOF:
			return buf, held, nil
		case err != nil:
			return buf, held, err
		}
	}
}

// readBody reads a POST body within MaxBodyBytes, the body budget and the
// body's read deadline. It returns the bytes it reserved, to release when
// the request ends; on false the answer is written, and the connection
// closes after it (the body is not read to its end).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int64, bool) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		s.failTooLarge(w)
		return nil, 0, false
	}
	rc := http.NewResponseController(w)
	if s.opts.BodyTimeout > 0 {
		// Real time, not opts.Now: it is the connection's deadline. A writer
		// that cannot (a test recorder) reads without one.
		_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	}
	var body []byte
	var held int64
	var err error
	if r.ContentLength >= 0 {
		body, held, err = s.limits.readSized(r.Body, r.ContentLength)
	} else {
		body, held, err = s.limits.readUnsized(r.Body, s.opts.MaxBodyBytes)
	}
	switch {
	case err == nil:
		bodyRead(w)
		// All of it was read: closing it now spares net/http the drain it
		// runs, when the response begins, for a body left open (a read to
		// EOF through an io.LimitReader it allocates).
		_ = r.Body.Close()
		if s.opts.BodyTimeout > 0 {
			// Cleared at once: net/http's background read of the
			// connection, started at the body's end, would otherwise hit the
			// deadline during a long call and cancel it.
			_ = rc.SetReadDeadline(time.Time{})
		}
		return body, held, true
	case errors.Is(err, errBodyBudget):
		s.fail(w, failBodyBytes)
	case errors.Is(err, errBodyTooLarge):
		s.failTooLarge(w)
	case isTimeout(err):
		s.fail(w, failBodyTimeout)
	default:
		s.fail(w, failBodyUnreadable)
	}
	return nil, held, false
}

// isTimeout reports whether err is a network timeout (a read deadline
// passed). Its variable is declared here, on the error path, so that a read
// that succeeds allocates none.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// failTooLarge answers a body over MaxBodyBytes, naming the limit.
func (s *Server) failTooLarge(w http.ResponseWriter) {
	s.failFor(w, failBodyTooLarge, nil, fmt.Sprintf("body over %d bytes", s.opts.MaxBodyBytes))
}

// InFlight is what the endpoint's POST requests hold at one moment.
type InFlight struct {
	Requests  int   // admitted (token and session checked) and not done; a batch's requests one each (SPEC §5b.15)
	BodyBytes int64 // body bytes reserved, of MaxBodyBytesInFlight
}

// InFlight returns the requests and body bytes in flight now.
func (s *Server) InFlight() InFlight {
	return InFlight{Requests: int(s.limits.inFlight.Load()), BodyBytes: s.limits.bytes.Load()}
}

// admitRequest takes one of the request bounds' slots for ns (the caller
// gives it back with s.limits.done), or answers the bound's refusal (429 for
// the namespace's, 503 for the endpoint's) and reports false.
func (s *Server) admitRequest(w http.ResponseWriter, ns string) bool {
	switch err := s.limits.admit(ns); {
	case errors.Is(err, errRequestsPerNamespace):
		s.fail(w, failRequestsPerNamespace)
		return false
	case err != nil:
		s.fail(w, failRequests)
		return false
	}
	return true
}

// admitBatch takes extra slots for ns, those of a batch's requests beyond
// the one its POST holds (SPEC §5b.15), or refuses the batch whole as
// admitRequest refuses a request (429 for the namespace's bound, 503 for
// the endpoint's), each of its requests counted refused, and reports
// false.
func (s *Server) admitBatch(w http.ResponseWriter, ns string, extra int) bool {
	err := s.limits.admitMore(ns, extra)
	if err == nil {
		return true
	}
	f := failRequests
	if errors.Is(err, errRequestsPerNamespace) {
		f = failRequestsPerNamespace
	}
	for range extra {
		s.opts.Observer.Refused(failures[f].bound) // and the POST's own, by fail
	}
	s.fail(w, f)
	return false
}
