package mcphttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// The bodies of the fixed error answers. notFoundBody is the same bytes for
// an unknown and a foreign session (SPEC §5 step 3, §6.3): it names nothing.
// None has an id: they answer before the request's id is read.
var (
	notFoundBody     = []byte(`{"jsonrpc":"2.0","error":{"code":-32001,"message":"session not found"}}` + "\n")
	unauthorizedBody = []byte(`{"jsonrpc":"2.0","error":{"code":-32001,"message":"unauthorized"}}` + "\n")
	forbiddenBody    = []byte(`{"jsonrpc":"2.0","error":{"code":-32001,"message":"forbidden"}}` + "\n")
)

// Status of each failure the transport answers without dispatching. One
// table, so a change of mapping is one line (STYLE §4).
//
//	Origin not allowed, Host not allowed       403
//	no, malformed, unknown, revoked, expired token 401
//	unknown, deleted, expired or foreign session 404
//	non-initialize without session, bad version,
//	  malformed JSON, batch                    400
//	a path other than the endpoint's           404
//	method other than POST/GET/DELETE          405
//	Accept missing a required type             406
//	second standalone stream                   409
//	body not in before BodyTimeout             408, connection closed
//	body over the limit                        413
//	Content-Type not JSON                      415
//	per-namespace cap, nothing idle to evict;
//	  namespace's requests in flight           429 + Retry-After
//	global caps (sessions, requests, body
//	  bytes); actor did not answer in time     503 (+ Retry-After for the caps)
//	anything else                              500, generic body, detail logged
func writeFixed(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

func writeNotFound(w http.ResponseWriter) { writeFixed(w, http.StatusNotFound, notFoundBody) }

func writeForbidden(w http.ResponseWriter) { writeFixed(w, http.StatusForbidden, forbiddenBody) }

// writeUnauthorized answers 401 with the challenge of RFC 6750: plain when
// no token was given, invalid_token when one was.
func writeUnauthorized(w http.ResponseWriter, tokenGiven bool) {
	challenge := `Bearer`
	if tokenGiven {
		challenge = `Bearer error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeFixed(w, http.StatusUnauthorized, unauthorizedBody)
}

// writeRPC writes a JSON-RPC answer with an HTTP status (200 for results and
// for JSON-RPC errors of a dispatched request; 4xx for protocol failures).
func writeRPC(w http.ResponseWriter, status int, r *response) {
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(errorResponse(r.ID, CodeInternalError, "internal error"))
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeRetryLater(w http.ResponseWriter, status int, after time.Duration, msg string) {
	secs := int(after / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeRPC(w, status, errorResponse(nil, CodeInternalError, msg))
}
