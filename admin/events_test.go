package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/admin"
)

// sseEvent is one event of a stream.
type sseEvent struct {
	id, kind string
	rec      mcpruntime.ProviderRecord
}

// stream opens GET /admin/v1/events with query and header and returns a
// reader of its events; the stream closes at cleanup.
func (e *env) stream(query string, header http.Header) (*http.Response, func() sseEvent) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/admin/v1/events"+query, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	for k, vs := range header {
		req.Header[k] = vs
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { res.Body.Close() })
	lines := bufio.NewScanner(res.Body)
	events := make(chan sseEvent, 64)
	go func() {
		defer close(events)
		var ev sseEvent
		for lines.Scan() {
			l := lines.Text()
			switch {
			case l == "":
				if ev.kind != "" {
					events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(l, "id: "):
				ev.id = l[4:]
			case strings.HasPrefix(l, "event: "):
				ev.kind = l[7:]
			case strings.HasPrefix(l, "data: "):
				_ = json.Unmarshal([]byte(l[6:]), &ev.rec)
			}
		}
	}()
	return res, func() sseEvent {
		e.t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				e.t.Fatal("event stream ended")
			}
			return ev
		case <-time.After(time.Minute):
			e.t.Fatal("no event within a minute")
		}
		return sseEvent{}
	}
}

// TestRunWithInputIsATurn: POST …/runs with an input starts the agent's
// turn; the event stream carries what the agent reports, resumes after
// Last-Event-ID, filters by thread, and says what a late reader missed.
func TestRunWithInputIsATurn(t *testing.T) {
	agent := &providertest.Agent{}
	e := newEnv(t, envOptions{drivers: map[string]driver.Factory{"agent": agent.Factory()}})
	e.walk([]step{
		{name: "instance", request: post("/admin/v1/instances", `{"id":"A","driver":"agent"}`), wantStatus: 201},
		{name: "thread", request: post("/admin/v1/threads", `{"id":"t1","instance":"A"}`), wantStatus: 201},
		{name: "open", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`), wantStatus: 201},
	})
	_, next := e.stream("?thread=t1", nil)
	r := e.do(post("/admin/v1/threads/t1/runs", `{"instance":"A","input":"post hello"}`))
	if r.status != 201 {
		t.Fatalf("start turn: %s", r)
	}
	run := field(t, r, "runId")
	if got := agent.Session("t1").Turns(); len(got) != 1 || got[0].Input != "post hello" || got[0].ID != run {
		t.Fatalf("turns = %+v", got)
	}
	started := next()
	if started.kind != "agent.turn_started" || started.rec.Turn != run || started.rec.Thread != "t1" || started.id == "" {
		t.Fatalf("first event = %+v", started)
	}
	agent.Session("t1").Say(run, "done")
	agent.Session("t1").End(run, driver.TurnCompleted)
	if ev := next(); ev.kind != "agent.message" || ev.rec.Text != "done" {
		t.Fatalf("second event = %+v", ev)
	}
	if ev := next(); ev.kind != mcpruntime.RecordTurnEnded || ev.rec.State != driver.TurnCompleted {
		t.Fatalf("third event = %+v", ev)
	}

	// Resumed after the first: the same two again, in order.
	_, again := e.stream("", http.Header{"Last-Event-Id": {started.id}})
	if ev := again(); ev.kind != "agent.message" {
		t.Fatalf("resumed: %+v", ev)
	}
	if ev := again(); ev.kind != mcpruntime.RecordTurnEnded {
		t.Fatalf("resumed: %+v", ev)
	}

	// Refusals of a run with an input.
	for _, tc := range []struct{ body, code string }{
		{`{"instance":"A","input":""}`, "invalid_argument"},
		{`{"instance":"A","input":"x","extra":1}`, admin.CodeInvalidRequest},
	} {
		checkError(t, e.do(post("/admin/v1/threads/t1/runs", tc.body)), tc.code)
	}
}

// TestEventStreamBounds: a bad Last-Event-ID is 400, no token 401, a
// stream beyond the bound 503, and a reader that fell behind the
// journal's bound gets a gap event.
func TestEventStreamBounds(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		req    request
		status int
	}{
		{request{method: http.MethodGet, path: "/admin/v1/events", header: http.Header{"Last-Event-Id": {"x"}}}, 400},
		{request{method: http.MethodGet, path: "/admin/v1/events?after=-1"}, 400},
		{request{method: http.MethodGet, path: "/admin/v1/events", auth: ptr("")}, 401},
	} {
		if r := e.do(tc.req); r.status != tc.status {
			t.Errorf("%s %v: %s, want %d", tc.req.path, tc.req.header, r, tc.status)
		}
	}
	var open []*http.Response
	for range admin.DefaultMaxEventStreams {
		res, _ := e.stream("", nil)
		open = append(open, res)
	}
	if r := e.do(get("/admin/v1/events")); r.status != http.StatusServiceUnavailable {
		t.Errorf("stream %d: %s, want 503", len(open)+1, r)
	}
	for _, res := range open {
		res.Body.Close()
	}
}

// TestEventStreamGap: records dropped by the journal's bound are named.
func TestEventStreamGap(t *testing.T) {
	rt, err := mcpruntime.New(mcpruntime.Config{ProviderJournal: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	ctx := context.Background()
	if err := rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rt.OpenProviderSession(ctx, id, "A"); err != nil {
			t.Fatal(err)
		}
	}
	// Provider events reach the journal from the actors' event stream, after
	// OpenProviderSession returned: wait for the third before reading.
	waitFor(t, "three sessions journaled", func() bool {
		page, err := rt.ProviderRecords(0, 8)
		return err == nil && page.Newest >= 3
	})
	e := &env{t: t, rt: rt}
	e.ts = httpServer(t, admin.New(rt, admin.Options{Token: adminToken, Logger: quiet()}))
	_, next := e.stream("?after=0", nil)
	gap := next()
	if gap.kind != "gap" {
		t.Fatalf("first event = %+v, want a gap", gap)
	}
	if ev := next(); ev.kind != mcpruntime.RecordSessionOpened || ev.id != "2" {
		t.Fatalf("after the gap: %+v", ev)
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func httpServer(t *testing.T, h http.Handler) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}
