package main

import (
	"errors"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
)

func TestTallyCalls(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	start, end := at(100), at(110) // the revoke call
	unauthorized := &mcpclient.StatusError{Code: 401}
	calls := []call{
		{sent: at(0), done: at(5), outcome: succeeded},                       // before: fine
		{sent: at(105), done: at(120), outcome: succeeded},                   // in flight across the revoke: fine
		{sent: at(110), done: at(115), outcome: succeeded},                   // sent at the instant it returned: fine
		{sent: at(111), done: at(112), outcome: succeeded},                   // sent after: stale
		{sent: at(102), done: at(108), outcome: rejected, err: unauthorized}, // during: expected
		{sent: at(120), done: at(121), outcome: rejected, err: unauthorized}, // after: expected
		{sent: at(50), done: at(60), outcome: rejected, err: unauthorized},   // before the revoke: error
		{sent: at(130), done: at(131), outcome: failed, err: errors.New("connection reset")},
	}
	got := tallyCalls(calls, start, end)
	if got.stale != 1 || got.rejected != 2 || len(got.errs) != 2 {
		t.Fatalf("tallyCalls = stale %d rejected %d errs %v; want 1, 2, 2 errors", got.stale, got.rejected, got.errs)
	}

	never := tallyCalls(calls[:1], time.Time{}, time.Time{})
	if never.stale != 0 || len(never.errs) != 0 {
		t.Fatalf("unrevoked token: %+v", never)
	}
}

func TestStreamClosing(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	start, end := at(100), at(110)
	tests := []struct {
		name    string
		closed  time.Time
		want    time.Duration
		wantOK  bool
		wantErr bool
	}{
		{"never closed", time.Time{}, 0, false, false},
		{"closed during the revoke call", at(105), 0, true, false},
		{"closed after", at(135), 25 * time.Millisecond, true, false},
		{"closed before the revoke", at(50), 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok, err := streamClosing(tt.closed, start, end)
			if d != tt.want || ok != tt.wantOK || (err != nil) != tt.wantErr {
				t.Errorf("streamClosing = %v, %v, %v; want %v, %v, error %v", d, ok, err, tt.want, tt.wantOK, tt.wantErr)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want outcome
	}{
		{nil, succeeded},
		{&mcpclient.StatusError{Code: 401}, rejected},
		{&mcpclient.StatusError{Code: 404}, rejected},
		{&mcpclient.StatusError{Code: 503}, failed},
		{&mcpclient.ToolError{Text: "x"}, failed},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
