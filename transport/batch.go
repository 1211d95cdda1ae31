package transport

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"

	"github.com/agenthost/mcpruntime/actors/session"
)

// JSON-RPC batches (SPEC §5b.15). MCP 2025-03-26 allowed a POST to carry a
// JSON array of messages; 2025-06-18 removed it. A batch is served on a
// session negotiated at 2025-03-26 and refused everywhere else (400,
// -32600, failBatch), initialize included: it may not be batched. Its
// requests run at once, each as it would alone, and the answer is one JSON
// array of their responses in the batch's order (application/json, never a
// stream: a request of a batch sends no progress or log); a batch of
// notifications and responses only is 202. Each request of a batch counts
// against the in-flight bounds as one alone does (SPEC §5.3): the POST
// holds one slot from its admission, and once the body is in, the batch
// takes one more for each request past the first, all or none, before any
// runs; a batch that does not fit is refused whole with the 429 or 503 +
// Retry-After of a request alone, and one of more requests than a bound
// holds is 400. Notifications and responses take no slot: they are done
// at once. An element that is not a
// JSON-RPC message is answered in place with -32600 and no id (no answer
// of the endpoint carries "id": null).

// maxBatch bounds the messages of one batch: its requests run at once.
const maxBatch = 64

// batchable reports whether a session negotiated at version takes batches.
func batchable(version string) bool { return version == "2025-03-26" }

// splitBatch returns the elements of body, a valid JSON array (json.Valid:
// the walk relies on it), as the bytes of each value. An empty array is
// errInvalid.
func splitBatch(body []byte) ([][]byte, error) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '[' {
		return nil, errInvalid
	}
	i = skipSpace(body, i+1)
	if body[i] == ']' {
		return nil, errInvalid
	}
	var out [][]byte
	for {
		end := skipValue(body, i)
		out = append(out, body[i:end])
		i = skipSpace(body, end)
		if body[i] == ']' {
			return out, nil
		}
		i = skipSpace(body, i+1) // past ','
	}
}

// batch serves a batch on session e, negotiated at 2025-03-26.
func (s *Server) batch(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, body []byte) {
	elems, err := splitBatch(body)
	switch {
	case err != nil:
		s.fail(w, failInvalidMessage)
		return
	case len(elems) > maxBatch:
		s.fail(w, failBatchTooLarge)
		return
	}
	msgs := make([]*message, len(elems))
	requests := 0
	for i, el := range elems {
		if msg, err := decodeMessage(el); err == nil {
			msgs[i] = msg
			if msg.isRequest() {
				requests++
			}
		}
	}
	// Each request holds a slot of the in-flight bounds while the batch
	// runs, the POST's own one of them; all are taken before any runs, or
	// none.
	if bound := min(s.limits.perNS, int(s.limits.requests)); requests > bound {
		s.failFor(w, failBatchTooLarge, nil, fmt.Sprintf("JSON-RPC batch of more than %d requests", bound))
		return
	}
	extra := max(requests-1, 0)
	if !s.admitRate(w, p.Namespace, len(msgs)-1, len(msgs)) || !s.admitBatch(w, p.Namespace, extra) {
		return
	}
	defer s.limits.doneMore(p.Namespace, extra)
	answers := make([]*batchWriter, len(elems))
	var wg sync.WaitGroup
	for i, msg := range msgs {
		bw := &batchWriter{header: http.Header{}}
		answers[i] = bw
		if msg == nil {
			s.failFor(bw, failInvalidMessage, nil, "") // no id: none is known
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.batched(bw, r, p, e, msg)
		}()
	}
	wg.Wait()
	out := []byte{'['}
	for _, bw := range answers {
		if bw.status == failures[failUnknownSession].status {
			s.fail(w, failUnknownSession) // the session ended under the batch
			return
		}
		if !bytes.HasPrefix([]byte(bw.header.Get("Content-Type")), []byte("application/json")) || bw.body.Len() == 0 {
			continue // a notification's, a response's, a cancelled request's: nothing
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, bytes.TrimRight(bw.body.Bytes(), "\n")...)
	}
	if len(out) == 1 {
		writeAccepted(w)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(append(out, ']', '\n'))
}

// batched serves one message of a batch as handlePost serves a message
// alone on a session: a response goes to the session's asks (a request
// of the batch cannot ask: see converse).
func (s *Server) batched(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, msg *message) {
	if claim, ok := metaVersion(msg.Params); ok && !served(claim) {
		s.failVersion(w, requestID(msg), claim)
		return
	}
	if msg.isRequest() && msg.Method == "initialize" {
		s.failFor(w, failInitialized, msg.ID, "")
		return
	}
	s.onSession(w, r, p, e, msg)
}

// batchWriter is the http.ResponseWriter of one message of a batch: it
// keeps the answer, which batch puts in the batch's. It cannot flush, so
// nothing streams on it.
type batchWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *batchWriter) Header() http.Header { return b.header }

func (b *batchWriter) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *batchWriter) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}
