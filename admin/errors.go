package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// Error codes of the admin API itself; the runtime's errors get theirs
// from errorTable. Codes are stable: clients branch on them.
const (
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeInvalidRequest       = "invalid_request"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeUnavailable          = "unavailable"
	// CodeNotHome: the thread (or client grant) lives on another node of
	// the cluster, which the message names; ask that node's admin API.
	CodeNotHome  = "not_home"
	CodeInternal = "internal"
)

// apiError is an error with its answer already decided.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func invalidRequest(msg string) *apiError {
	return &apiError{http.StatusBadRequest, CodeInvalidRequest, msg}
}

var (
	errUnauthorized = &apiError{http.StatusUnauthorized, CodeUnauthorized, "missing or invalid admin token"}
	errNotFound     = &apiError{http.StatusNotFound, CodeNotFound, "no such route"}
	errMethod       = &apiError{http.StatusMethodNotAllowed, CodeMethodNotAllowed, "method not allowed on this route; see the Allow header"}
	errTooLarge     = &apiError{http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body exceeds 1 MiB"}
	errMediaType    = &apiError{http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "request body must be application/json"}
	errInternal     = &apiError{http.StatusInternalServerError, CodeInternal, "internal error"}
	errUnavailable  = &apiError{http.StatusServiceUnavailable, CodeUnavailable, "runtime unavailable; retry later"}
	errBackupBusy   = &apiError{http.StatusServiceUnavailable, CodeUnavailable, "a backup is already running; retry when it ends"}
)

// errorTable maps the runtime's sentinels to statuses and codes. The first
// entry that errors.Is matches wins. Anything not listed is a 500 whose
// detail is logged, never returned.
//
// ErrUnauthenticated is deliberately absent: it is about MCP tokens, and
// the admin API's own 401 means the admin token was wrong. A runtime error
// wrapping it here would be a bug, hence a 500.
var errorTable = []struct {
	target error
	status int
	code   string
}{
	{mcpruntime.ErrUnknownThread, http.StatusNotFound, "unknown_thread"},
	{mcpruntime.ErrUnknownInstance, http.StatusNotFound, "unknown_instance"},
	{mcpruntime.ErrUnknownProviderSession, http.StatusNotFound, "unknown_provider_session"},
	{mcpruntime.ErrUnknownClient, http.StatusNotFound, "unknown_client"},
	{mcpruntime.ErrThreadExists, http.StatusConflict, "thread_exists"},
	// The cap on threads (Config.MaxThreads): the state, not the request,
	// is in the way; deleting a thread makes room.
	{mcpruntime.ErrTooManyThreads, http.StatusConflict, "too_many_threads"},
	{mcpruntime.ErrInstanceExists, http.StatusConflict, "instance_exists"},
	{mcpruntime.ErrArchivedThread, http.StatusConflict, "thread_archived"},
	{mcpruntime.ErrRunActive, http.StatusConflict, "run_active"},
	{mcpruntime.ErrNotCurrentInstance, http.StatusConflict, "not_current_instance"},
	{mcpruntime.ErrNoRun, http.StatusConflict, "no_run"},
	{mcpruntime.ErrBusy, http.StatusConflict, "busy"},
	{mcpruntime.ErrNoProviderSession, http.StatusConflict, "no_provider_session"},
	{mcpruntime.ErrTurnsUnsupported, http.StatusConflict, "turns_unsupported"},
	// Several nodes (SPEC §5d): the thread's actor runs on its home node;
	// the message names it (the *NotHomeError's text).
	{mcpruntime.ErrNotHome, http.StatusConflict, CodeNotHome},
	{mcpruntime.ErrNotLive, http.StatusConflict, "not_live"},
	{mcpruntime.ErrReadOnly, http.StatusForbidden, "read_only"},
	{mcpruntime.ErrCredentialRequired, http.StatusBadRequest, "credential_required"},
	{mcpruntime.ErrInvalidID, http.StatusBadRequest, "invalid_id"},
	{mcpruntime.ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
	{mcpruntime.ErrUnknownDriver, http.StatusBadRequest, "unknown_driver"},
	// OAuth sign-in is off (no public origin, or an external issuer): the
	// server's configuration, not the request, is in the way.
	{mcpruntime.ErrOAuthDisabled, http.StatusConflict, "oauth_disabled"},
	{mcpruntime.ErrTooManyPairingCodes, http.StatusTooManyRequests, "too_many_pairing_codes"},
	{mcpruntime.ErrInvalidDriverConfig, http.StatusBadRequest, "invalid_driver_config"},
	// The provider's driver could not open the session: upstream failure.
	{mcpruntime.ErrProviderOpenFailed, http.StatusBadGateway, "provider_open_failed"},
	// The agent did not take the prompt: upstream failure.
	{mcpruntime.ErrTurnRefused, http.StatusBadGateway, "turn_refused"},
	// The runtime is shutting down, an actor did not answer in time, or the
	// request's own context ended: nothing is wrong with the request.
	{mcpruntime.ErrClosed, http.StatusServiceUnavailable, CodeUnavailable},
	// A backup of a runtime that keeps its state in memory (or in etcd).
	{mcpruntime.ErrNotDurable, http.StatusConflict, "not_durable"},
	{mcpruntime.ErrTimeout, http.StatusServiceUnavailable, CodeUnavailable},
	{mcpruntime.ErrUnavailable, http.StatusServiceUnavailable, CodeUnavailable},
	// This node cannot prove its replica current (etcd unreachable, or the
	// node paused): it serves nothing until it can.
	{mcpruntime.ErrNodeUnavailable, http.StatusServiceUnavailable, CodeUnavailable},
	{context.DeadlineExceeded, http.StatusServiceUnavailable, CodeUnavailable},
	{context.Canceled, http.StatusServiceUnavailable, CodeUnavailable},
}

// classify returns the answer for err.
func classify(err error) *apiError {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae
	}
	for _, e := range errorTable {
		if errors.Is(err, e.target) {
			if e.status == http.StatusBadGateway {
				// The driver's error may name paths or commands: logged, not returned.
				what := "the provider's driver could not open the session"
				if e.target == mcpruntime.ErrTurnRefused {
					what = "the agent did not accept the turn"
				}
				return &apiError{e.status, e.code, what + "; see the runtime's log"}
			}
			if e.status >= 500 {
				return &apiError{e.status, e.code, errUnavailable.message}
			}
			if nh, ok := errors.AsType[*mcpruntime.NotHomeError](err); ok {
				return &apiError{e.status, e.code, nh.Error()} // "thread t1 lives on node n1"
			}
			// The runtime's messages name ids and conditions, never tokens.
			return &apiError{e.status, e.code, err.Error()}
		}
	}
	return errInternal
}

// errorBody is the body of every error answer.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// writeError answers err and returns the status written. Server-side
// failures are logged with their detail; the client gets a generic message.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) int {
	ae := classify(err)
	switch {
	case ae.status == http.StatusInternalServerError:
		s.opts.Logger.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	case ae.status >= 500:
		s.opts.Logger.Warn("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, ae.status, errorBody{Error: ae.code, Message: ae.message})
	return ae.status
}

// WriteError answers status with the admin API's error body,
// {"error": code, "message": message}, for the handlers that share the
// admin listener (health checks, metrics, its Host/Origin guard), so that
// every answer of the listener has one shape.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody{Error: code, Message: message})
}

// writeJSON writes v as the JSON body of a status answer; v nil writes no
// body. Every answer is no-store: several carry tokens, and none is worth
// a cache's keeping.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if v == nil {
		w.WriteHeader(status)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here; they always marshal.
		b, status = []byte(`{"error":"internal","message":"internal error"}`), http.StatusInternalServerError
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
