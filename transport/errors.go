package transport

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime/internal/fault"
)

// failure names one answer the endpoint gives instead of a result: a
// request refused before dispatch (SPEC §5 steps 0–5), or the JSON-RPC
// error of a dispatched one. Call sites name the failure; its status,
// JSON-RPC code, message and headers are in [failures], the one table,
// so a change of mapping is one line.
type failure uint8

const (
	_ failure = iota
	// Before dispatch: no id is known, none is echoed.
	failForbidden            // Origin or Host not allowed (step 1)
	failUnavailable          // the node does not serve (Host.Available; before step 2, and at step 0)
	failHomeGone             // the request's home node is gone or unreachable, and it names no session (Host.Route)
	failNoToken              // no Authorization header (step 2); OAuth discovery added (failAuth)
	failBadToken             // malformed header; unknown, revoked or expired token (steps 2, 0); OAuth discovery added unless provider-shaped (failAuth)
	failUnknownSession       // unknown, ended or foreign session (steps 3, 0): the same bytes either way
	failRequestsPerNamespace // the namespace's POSTs in flight (step 4)
	failRequests             // the endpoint's POSTs in flight (step 4)
	failBodyBytes            // the bytes of bodies held (step 4)
	failAcceptPost           // POST Accept without both types (step 5)
	failAcceptGet            // GET Accept without text/event-stream (step 5)
	failContentType          // Content-Type not JSON (step 5)
	failBodyTooLarge         // over MaxBodyBytes; the message names the limit (step 5)
	failBodyTimeout          // the body missed its read deadline (step 0); the connection closes
	failBodyUnreadable       // the body could not be read
	failParse                // malformed JSON (step 5)
	failEncoding             // invalid UTF-8 or an escaped lone surrogate (step 5)
	failBatch                // a JSON-RPC batch but on a 2025-03-26 session (step 5)
	failBatchTooLarge        // a batch of more than maxBatch messages
	failInvalidMessage       // not a JSON-RPC 2.0 message (step 5)
	failUnsupportedVersion   // a protocol version not served (step 5, SPEC §5a); its data lists the served ones
	failStreamNoSession      // GET or DELETE without Mcp-Session-Id (step 5)
	failPath                 // a path other than the endpoint's
	failMethod               // a method other than POST, GET, DELETE
	failPanic                // a handler panicked
	// About a request whose id is known: echoed.
	failNoSession         // a request other than initialize without a session (step 5)
	failMethodNoSession   // an unknown method without a session: -32601, so a prober falls back
	failInitialized       // initialize on a session
	failNamespaceSessions // MaxSessionsPerNamespace, nothing idle to evict
	failSessions          // MaxSessions
	failClosing           // the endpoint is closing: no session starts
	failSessionNotStarted // the session actor did not answer (initialize)
	failSpawn             // the session actor could not be spawned
	failStreamOpen        // a second standalone stream (GET)
	failSessionBusy       // the session actor did not answer in time (GET, DELETE)
	// JSON-RPC errors of a dispatched request: HTTP 200.
	failInvalidParams        // params missing or malformed
	failMethodNotFound       // a method not served
	failBackendError         // a JSON-RPC error of a code of its own (Response.Err): the asks' failures
	failDuplicateID          // the id of a request in flight on the session
	failBackendFailed        // the backend failed (no row of backendErrors); the detail is logged, never answered
	failResourceNotFound     // resources/subscribe or resources/read of a URI unknown or not readable: the same answer
	failTooManySubscriptions // resources/subscribe past Options.MaxSubscriptions
	// The backend's domain errors (backendErrors): HTTP 200 but the last.
	failUnknownTool            // fault.ErrUnknownTool; the message names the tool
	failUnknownPrompt          // fault.ErrUnknownPrompt; the message names the prompt
	failUnknownReference       // fault.ErrUnknownReference
	failInvalidArgument        // fault.ErrInvalidArgument; the message is the error's
	failInvalidCursor          // fault.ErrInvalidCursor; the message names the list
	failResourceNotFoundModern // fault.ErrResourceNotFound in the 2026-07-28 era
	failCapabilityNotDeclared  // fault.ErrCapabilityNotDeclared in a session: a tools/call's isError result, else this error
	// The 2026-07-28 era (SPEC §5a): its ladder's answers echo the id.
	failModernMeta        // params._meta missing or malformed (ladder step 2)
	failHeaderMismatch    // a per-request header disagrees with the body (steps 3, 5, 7)
	failModernMethod      // a method the era does not have (step 6): 404
	failModernStream      // GET or DELETE with the modern header: 405
	failRequestState      // a requestState not sealed by this runtime for this request, expired or used
	failMissingCapability // the backend needs a client capability the request did not declare
	failModernInFlight    // MaxModernRequestsPerNamespace
	failRateLimited       // RatePerNamespace: its Retry-After is the bucket's refill
	failListenPerNS       // MaxListenStreamsPerNamespace
	failListen            // MaxListenStreams, or the endpoint is closing
	failureCount          // keep last
)

// An answer is what the table says about one failure.
type answer struct {
	status  int
	code    int    // JSON-RPC error code
	message string // the default message
	// retry: a Retry-After header of Options.RetryAfter (whole seconds, at
	// least 1).
	retry bool
	// header is one more header, name and value; "" for none.
	header [2]string
	// bound names the bound that refused, for Observer.Refused; "" for none.
	bound string
	// body is the whole answer without an id, built once from code and
	// message: what is written when neither an id nor another message is
	// given.
	body []byte
}

// failures is the one table. The 404 of an unknown session is the same
// bytes for an unknown and a foreign session (SPEC §5 step 3, §6.3): it
// names nothing.
var failures = [failureCount]answer{
	failForbidden:              {status: http.StatusForbidden, code: CodeRefused, message: "forbidden"},
	failUnavailable:            {status: http.StatusServiceUnavailable, code: CodeInternalError, message: "node unavailable", retry: true, bound: "unavailable"},
	failHomeGone:               {status: http.StatusServiceUnavailable, code: CodeInternalError, message: "home node unavailable", retry: true},
	failNoToken:                {status: http.StatusUnauthorized, code: CodeRefused, message: "unauthorized", header: [2]string{"WWW-Authenticate", `Bearer`}},
	failBadToken:               {status: http.StatusUnauthorized, code: CodeRefused, message: "unauthorized", header: [2]string{"WWW-Authenticate", `Bearer error="invalid_token"`}},
	failUnknownSession:         {status: http.StatusNotFound, code: CodeRefused, message: "session not found"},
	failRequestsPerNamespace:   {status: http.StatusTooManyRequests, code: CodeInternalError, message: errRequestsPerNamespace.Error(), retry: true, bound: "requests_per_namespace"},
	failRequests:               {status: http.StatusServiceUnavailable, code: CodeInternalError, message: errRequests.Error(), retry: true, bound: "requests"},
	failBodyBytes:              {status: http.StatusServiceUnavailable, code: CodeInternalError, message: errBodyBudget.Error(), retry: true, bound: "body_bytes"},
	failAcceptPost:             {status: http.StatusNotAcceptable, code: CodeInvalidRequest, message: "Accept must include application/json and text/event-stream"},
	failAcceptGet:              {status: http.StatusNotAcceptable, code: CodeInvalidRequest, message: "Accept must include text/event-stream"},
	failContentType:            {status: http.StatusUnsupportedMediaType, code: CodeInvalidRequest, message: "Content-Type must be application/json"},
	failBodyTooLarge:           {status: http.StatusRequestEntityTooLarge, code: CodeInvalidRequest, message: "body over the limit"},
	failBodyTimeout:            {status: http.StatusRequestTimeout, code: CodeInvalidRequest, message: "body not received in time"},
	failBodyUnreadable:         {status: http.StatusBadRequest, code: CodeParseError, message: "could not read body"},
	failParse:                  {status: http.StatusBadRequest, code: CodeParseError, message: "parse error"},
	failEncoding:               {status: http.StatusBadRequest, code: CodeParseError, message: "body is " + errEncoding.Error()},
	failBatch:                  {status: http.StatusBadRequest, code: CodeInvalidRequest, message: "JSON-RPC batches are not supported"},
	failBatchTooLarge:          {status: http.StatusBadRequest, code: CodeInvalidRequest, message: "JSON-RPC batch of more than " + strconv.Itoa(maxBatch) + " messages"},
	failInvalidMessage:         {status: http.StatusBadRequest, code: CodeInvalidRequest, message: "invalid JSON-RPC message"},
	failUnsupportedVersion:     {status: http.StatusBadRequest, code: CodeUnsupportedProtocolVersion, message: "Unsupported protocol version"},
	failStreamNoSession:        {status: http.StatusBadRequest, code: CodeSessionRequired, message: "Mcp-Session-Id required"},
	failPath:                   {status: http.StatusNotFound, code: CodeInvalidRequest, message: "not found"},
	failMethod:                 {status: http.StatusMethodNotAllowed, code: CodeInvalidRequest, message: "method not allowed", header: [2]string{"Allow", "POST, GET, DELETE"}},
	failPanic:                  {status: http.StatusInternalServerError, code: CodeInternalError, message: "internal error"},
	failNoSession:              {status: http.StatusBadRequest, code: CodeSessionRequired, message: "Mcp-Session-Id required: send initialize first"},
	failMethodNoSession:        {status: http.StatusBadRequest, code: CodeMethodNotFound, message: "method not found: send initialize first"},
	failInitialized:            {status: http.StatusBadRequest, code: CodeInvalidRequest, message: "session already initialized"},
	failNamespaceSessions:      {status: http.StatusTooManyRequests, code: CodeInternalError, message: "too many sessions for this credential", retry: true, bound: "sessions_per_namespace"},
	failSessions:               {status: http.StatusServiceUnavailable, code: CodeInternalError, message: "session limit reached", retry: true, bound: "sessions"},
	failClosing:                {status: http.StatusServiceUnavailable, code: CodeInternalError, message: "session limit reached", retry: true},
	failSessionNotStarted:      {status: http.StatusServiceUnavailable, code: CodeInternalError, message: "session did not start"},
	failSpawn:                  {status: http.StatusInternalServerError, code: CodeInternalError, message: "internal error"},
	failStreamOpen:             {status: http.StatusConflict, code: CodeInvalidRequest, message: "a stream is already open for this session"},
	failSessionBusy:            {status: http.StatusServiceUnavailable, code: CodeInternalError, message: "session busy"},
	failInvalidParams:          {status: http.StatusOK, code: CodeInvalidParams, message: "invalid params"},
	failMethodNotFound:         {status: http.StatusOK, code: CodeMethodNotFound, message: "method not found"},
	failBackendError:           {status: http.StatusOK, code: CodeInvalidParams, message: "invalid params"},
	failDuplicateID:            {status: http.StatusOK, code: CodeInvalidRequest, message: "request id already in flight"},
	failBackendFailed:          {status: http.StatusOK, code: CodeInternalError, message: "internal error"},
	failResourceNotFound:       {status: http.StatusOK, code: CodeResourceNotFound, message: "Resource not found"},
	failTooManySubscriptions:   {status: http.StatusOK, code: CodeInvalidRequest, message: "too many subscriptions for this session"},
	failUnknownTool:            {status: http.StatusOK, code: CodeInvalidParams, message: "unknown tool"},
	failUnknownPrompt:          {status: http.StatusOK, code: CodeInvalidParams, message: "unknown prompt"},
	failUnknownReference:       {status: http.StatusOK, code: CodeInvalidParams, message: "unknown reference"},
	failInvalidArgument:        {status: http.StatusOK, code: CodeInvalidParams, message: "invalid argument"},
	failInvalidCursor:          {status: http.StatusOK, code: CodeInvalidParams, message: "invalid cursor"},
	failResourceNotFoundModern: {status: http.StatusOK, code: CodeInvalidParams, message: "Resource not found"},
	failCapabilityNotDeclared:  {status: http.StatusOK, code: CodeInvalidParams, message: "client capability not declared"},
	failModernMeta:             {status: http.StatusBadRequest, code: CodeInvalidParams, message: "invalid params._meta"},
	failHeaderMismatch:         {status: http.StatusBadRequest, code: CodeHeaderMismatch, message: "header mismatch"},
	failModernMethod:           {status: http.StatusNotFound, code: CodeMethodNotFound, message: "method not found"},
	failModernStream:           {status: http.StatusMethodNotAllowed, code: CodeInvalidRequest, message: "2026-07-28 has no GET or DELETE: POST every request", header: [2]string{"Allow", "POST"}},
	failRequestState:           {status: http.StatusBadRequest, code: CodeInvalidParams, message: "invalid requestState"},
	failMissingCapability:      {status: http.StatusBadRequest, code: CodeMissingRequiredClientCapability, message: "missing required client capability"},
	failRateLimited:            {status: http.StatusTooManyRequests, code: CodeInternalError, message: "rate limit of this credential exceeded", bound: "rate_per_namespace"},
	failModernInFlight:         {status: http.StatusTooManyRequests, code: CodeInternalError, message: "too many requests in flight for this credential", retry: true, bound: "modern_requests_per_namespace"},
	failListenPerNS:            {status: http.StatusTooManyRequests, code: CodeInternalError, message: "too many listen streams for this credential", retry: true, bound: "listen_per_namespace"},
	failListen:                 {status: http.StatusServiceUnavailable, code: CodeInternalError, message: "listen stream limit reached", retry: true, bound: "listen"},
}

// backendErrors maps the domain errors a Backend's feature methods
// return to the failure answered, in each era (STYLE §4, the shape of
// etcd's toGRPCErrorMap): the first row whose error the backend's
// matches (errors.Is) answers it; an error no row matches is
// failBackendFailed, -32603 with a fixed message, the error logged. A
// request whose context ended is answered nothing, whatever the error.
var backendErrors = [...]struct {
	err             error
	session, modern failure
}{
	{fault.ErrUnknownTool, failUnknownTool, failUnknownTool},
	{fault.ErrResourceNotFound, failResourceNotFound, failResourceNotFoundModern}, // -32002 in a session, -32602 in 2026-07-28; data.uri
	{fault.ErrUnknownPrompt, failUnknownPrompt, failUnknownPrompt},
	{fault.ErrUnknownReference, failUnknownReference, failUnknownReference},
	{fault.ErrInvalidArgument, failInvalidArgument, failInvalidArgument},
	{fault.ErrInvalidCursor, failInvalidCursor, failInvalidCursor},
	{fault.ErrCapabilityNotDeclared, failCapabilityNotDeclared, failMissingCapability}, // 2026-07-28: -32021 + data.requiredCapabilities
	{ErrNotServed, failMethodNotFound, failMethodNotFound},
}

// backendFailure is the failure that answers err, a feature method's
// error, in era.
func backendFailure(err error, era Era) failure {
	for _, row := range backendErrors {
		if errors.Is(err, row.err) {
			if era == EraModern {
				return row.modern
			}
			return row.session
		}
	}
	return failBackendFailed
}

func init() {
	for f := range failures {
		a := &failures[f]
		if a.status == 0 {
			continue
		}
		b, err := json.Marshal(errorResponse(nil, a.code, a.message))
		if err != nil {
			panic(err)
		}
		a.body = append(b, '\n')
	}
}

// fail answers f with its default message and no id. Every refusal that
// names no request comes here: its body was built once.
func (s *Server) fail(w http.ResponseWriter, f failure) {
	a := &failures[f]
	s.failHeaders(w, a)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(a.status)
	w.Write(a.body)
}

// failAuth answers a 401, f being failNoToken or failBadToken. When the
// endpoint offers OAuth discovery and the request's token is not
// provider-shaped, WWW-Authenticate carries the challenge after the
// table's value: `Bearer resource_metadata="…"` or `Bearer
// error="invalid_token", resource_metadata="…"` (RFC 9728 §5.1). An agent
// the host launched is never sent into an OAuth flow (SPEC §5c).
func (s *Server) failAuth(w http.ResponseWriter, f failure, provider bool) {
	a := &failures[f]
	if s.challenge == "" || provider {
		s.fail(w, f)
		return
	}
	s.failHeaders(w, a)
	sep := " "
	if strings.Contains(a.header[1], " ") {
		sep = ", "
	}
	h := w.Header()
	h.Set("WWW-Authenticate", a.header[1]+sep+s.challenge)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(a.status)
	w.Write(a.body)
}

// failFor answers f about the request with id (nil: unknown, left out),
// with message instead of the default one unless it is "".
func (s *Server) failFor(w http.ResponseWriter, f failure, id json.RawMessage, message string) {
	a := &failures[f]
	if message == "" {
		message = a.message
	}
	s.failWith(w, f, errorResponse(id, a.code, message))
}

// failWith answers f with r, a JSON-RPC error response built by the
// caller (data of its own).
func (s *Server) failWith(w http.ResponseWriter, f failure, r *response) {
	a := &failures[f]
	s.failHeaders(w, a)
	writeJSON(w, a.status, r)
}

func (s *Server) failHeaders(w http.ResponseWriter, a *answer) {
	h := w.Header()
	if a.header[0] != "" {
		h.Set(a.header[0], a.header[1])
	}
	if a.retry {
		h.Set("Retry-After", strconv.Itoa(max(int(s.opts.RetryAfter/time.Second), 1)))
	}
	if a.bound != "" {
		s.opts.Observer.Refused(a.bound)
	}
}

// The answers that are not failures.

// writeResult answers a request with its result: 200, JSON.
func writeResult(w http.ResponseWriter, id json.RawMessage, result any) {
	writeJSON(w, http.StatusOK, resultResponse(id, result))
}

// writeResponse answers a request with r, a result or a JSON-RPC error
// built elsewhere (a tool's answer): 200, JSON.
func writeResponse(w http.ResponseWriter, r *response) { writeJSON(w, http.StatusOK, r) }

// writeAccepted answers a notification or a response: 202, no body.
func writeAccepted(w http.ResponseWriter) { w.WriteHeader(http.StatusAccepted) }

// writeDeleted answers the DELETE that ended a session: 204.
func writeDeleted(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

// startEventStream answers 200 text/event-stream; events follow.
func startEventStream(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// writeJSON writes a JSON-RPC message with an HTTP status. Every JSON
// answer is no-store.
func writeJSON(w http.ResponseWriter, status int, r *response) {
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

// statusWriter records the status written, for the Observer. Unwrap keeps
// http.ResponseController (Flush, read deadlines) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	// bodyUnread: the request has a body that was not read (yet). An answer
	// written then closes the connection at once: net/http would otherwise
	// read the rest of the body (up to 256 KiB, with no deadline of its
	// own), before answering and again when the handler returns, so a
	// refused slow client would hold its goroutine after all.
	bodyUnread bool
	// revision, several nodes: the revision the node applied, set in
	// HeaderRevision as the answer begins unless a home node's forwarded
	// answer brought its own.
	revision func() int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if w.revision != nil && w.Header().Get(HeaderRevision) == "" {
			w.Header().Set(HeaderRevision, strconv.FormatInt(w.revision(), 10))
		}
		if w.bodyUnread {
			w.Header().Set("Connection", "close") // no read before the answer
			// and none after it: the deadline has passed.
			_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now())
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answered is the status w wrote: 200 if the handler wrote none.
func (w *statusWriter) answered() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// bodyRead tells w, the request's statusWriter, that its body was read.
func bodyRead(w http.ResponseWriter) {
	if sw, ok := w.(*statusWriter); ok {
		sw.bodyUnread = false
	}
}
