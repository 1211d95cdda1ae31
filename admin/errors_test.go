package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestClassify checks every row of the error table with a wrapped
// sentinel, as the runtime returns them, plus the rows of the admin API's
// own errors and the fallback.
func TestClassify(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantDetail bool // the message is the error's text
	}{
		{"unknown thread", mcpruntime.ErrUnknownThread, 404, "unknown_thread", true},
		{"unknown instance", mcpruntime.ErrUnknownInstance, 404, "unknown_instance", true},
		{"unknown provider session", mcpruntime.ErrUnknownProviderSession, 404, "unknown_provider_session", true},
		{"unknown client", mcpruntime.ErrUnknownClient, 404, "unknown_client", true},
		{"thread exists", mcpruntime.ErrThreadExists, 409, "thread_exists", true},
		{"too many threads", mcpruntime.ErrTooManyThreads, 409, "too_many_threads", true},
		{"instance exists", mcpruntime.ErrInstanceExists, 409, "instance_exists", true},
		{"archived", mcpruntime.ErrArchivedThread, 409, "thread_archived", true},
		{"run active", mcpruntime.ErrRunActive, 409, "run_active", true},
		{"not current", mcpruntime.ErrNotCurrentInstance, 409, "not_current_instance", true},
		{"no run", mcpruntime.ErrNoRun, 409, "no_run", true},
		{"no provider session", mcpruntime.ErrNoProviderSession, 409, "no_provider_session", true},
		{"turns unsupported", mcpruntime.ErrTurnsUnsupported, 409, "turns_unsupported", true},
		{"turn refused", mcpruntime.ErrTurnRefused, 502, "turn_refused", false}, // the agent's words are logged
		{"busy", mcpruntime.ErrBusy, 409, "busy", true},
		{"not home", &mcpruntime.NotHomeError{Kind: "thread", ID: "t1", Home: "n1"}, 409, "not_home", false}, // its own text: TestClassifyNotHome
		{"not live", mcpruntime.ErrNotLive, 409, "not_live", true},
		{"read only", mcpruntime.ErrReadOnly, 403, "read_only", true},
		{"credential required", mcpruntime.ErrCredentialRequired, 400, "credential_required", true},
		{"invalid id", mcpruntime.ErrInvalidID, 400, "invalid_id", true},
		{"invalid argument", mcpruntime.ErrInvalidArgument, 400, "invalid_argument", true},
		{"unknown driver", mcpruntime.ErrUnknownDriver, 400, "unknown_driver", true},
		{"invalid driver config", mcpruntime.ErrInvalidDriverConfig, 400, "invalid_driver_config", true},
		{"provider open failed", mcpruntime.ErrProviderOpenFailed, 502, "provider_open_failed", false},
		{"oauth disabled", mcpruntime.ErrOAuthDisabled, 409, "oauth_disabled", true},
		{"too many pairing codes", mcpruntime.ErrTooManyPairingCodes, 429, "too_many_pairing_codes", true},
		{"closed", mcpruntime.ErrClosed, 503, "unavailable", false},
		{"not durable", mcpruntime.ErrNotDurable, 409, "not_durable", true},
		{"actor timeout", mcpruntime.ErrTimeout, 503, "unavailable", false},
		{"actor gone", mcpruntime.ErrUnavailable, 503, "unavailable", false},
		{"node unavailable", mcpruntime.ErrNodeUnavailable, 503, "unavailable", false},
		{"deadline", context.DeadlineExceeded, 503, "unavailable", false},
		{"canceled", context.Canceled, 503, "unavailable", false},
		{"unauthenticated is not ours", mcpruntime.ErrUnauthenticated, 500, "internal", false},
		{"anything else", errors.New("disk on fire"), 500, "internal", false},
		{"admin error", errMediaType, 415, "unsupported_media_type", false},
		{"wrapped admin error", fmt.Errorf("decode: %w", errTooLarge), 413, "body_too_large", false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := fmt.Errorf("doing something with x1: %w", test.err)
			got := classify(err)
			if got.status != test.wantStatus || got.code != test.wantCode {
				t.Errorf("classify(%v) = %d %s, want %d %s", err, got.status, got.code, test.wantStatus, test.wantCode)
			}
			if detail := strings.Contains(got.message, "x1"); detail != test.wantDetail {
				t.Errorf("classify(%v) message %q: carries the detail = %v, want %v", err, got.message, detail, test.wantDetail)
			}
		})
	}
	// Every row of the table is exercised above.
	for _, row := range errorTable {
		found := false
		for _, test := range tests {
			found = found || errors.Is(test.err, row.target)
		}
		if !found {
			t.Errorf("no test for the row of %v", row.target)
		}
	}
}

// TestClassifyFirstMatchWins checks that an error matching two sentinels
// gets the first row's answer, as the table's order promises.
func TestClassifyFirstMatchWins(t *testing.T) {
	err := fmt.Errorf("%w: %w", mcpruntime.ErrUnknownThread, mcpruntime.ErrInvalidArgument)
	if got := classify(err); got.status != http.StatusNotFound || got.code != "unknown_thread" {
		t.Errorf("classify(%v) = %d %s, want 404 unknown_thread", err, got.status, got.code)
	}
}

// TestClassifyNotHome: a thread of another node is 409 not_home, and the
// message is the *NotHomeError's own text, which names the home node —
// whatever the runtime wrapped around it — in the admin API's JSON shape.
func TestClassifyNotHome(t *testing.T) {
	err := fmt.Errorf("start run on t1: %w", &mcpruntime.NotHomeError{Kind: "thread", ID: "t1", Home: "n1"})
	s := &Server{opts: Options{Logger: slog.New(slog.DiscardHandler)}}
	rec := httptest.NewRecorder()
	if status := s.writeError(rec, httptest.NewRequest(http.MethodPost, "/admin/v1/threads/t1/runs", nil), err); status != http.StatusConflict {
		t.Fatalf("writeError = %d, want 409", status)
	}
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	want := errorBody{Error: CodeNotHome, Message: "thread t1 lives on node n1"}
	if rec.Code != http.StatusConflict || body != want {
		t.Errorf("answer %d %+v, want 409 %+v", rec.Code, body, want)
	}
}

// TestClassifyNodeUnavailable: a node that cannot prove its replica
// current answers 503 unavailable with the generic message, like any other
// unavailability.
func TestClassifyNodeUnavailable(t *testing.T) {
	err := fmt.Errorf("authenticate: %w", mcpruntime.ErrNodeUnavailable)
	got := classify(err)
	if got.status != http.StatusServiceUnavailable || got.code != CodeUnavailable || got.message != errUnavailable.message {
		t.Errorf("classify(%v) = %d %s %q, want 503 unavailable %q", err, got.status, got.code, got.message, errUnavailable.message)
	}
}
