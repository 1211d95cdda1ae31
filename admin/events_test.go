package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/admin"
)

// sseEvent is one event of a stream.
type sseEvent struct {
	id, kind string
	rec      mcpruntime.Record
	data     json.RawMessage // the data as sent
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
				ev.data = json.RawMessage(l[6:])
				_ = json.Unmarshal(ev.data, &ev.rec)
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
	if ev := next(); ev.kind != mcpruntime.RecordRunStarted || ev.rec.Run != run || ev.rec.Instance != "A" {
		t.Fatalf("first event = %+v, want the run started", ev)
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
	if ev := next(); ev.kind != mcpruntime.RecordRunEnded || ev.rec.Run != run {
		t.Fatalf("fourth event = %+v, want the run ended", ev)
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
	rt, err := mcpruntime.New(mcpruntime.Config{Journal: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	ctx := context.Background()
	var opened atomic.Int32
	defer rt.SubscribeProviderEvents(func(e provider.Event) {
		if _, ok := e.(*provider.SessionOpened); ok {
			opened.Add(1)
		}
	})()
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
	// OpenProviderSession returned: wait for the third before reading
	// (the journal hears each event before this subscriber does).
	waitFor(t, "three sessions journaled", func() bool { return opened.Load() == 3 })
	e := &env{t: t, rt: rt}
	e.ts = httpServer(t, admin.New(rt, admin.Options{Token: adminToken, Logger: quiet()}))
	_, next := e.stream("?after=0", nil)
	gap := next()
	if gap.kind != "gap" {
		t.Fatalf("first event = %+v, want a gap", gap)
	}
	var g struct{ From, To uint64 }
	if err := json.Unmarshal(gap.data, &g); err != nil || g.From != 1 || g.To < 1 {
		t.Fatalf("gap = %s (%v), want from 1", gap.data, err)
	}
	if ev := next(); ev.id != strconv.FormatUint(g.To+1, 10) {
		t.Fatalf("after the gap to %d: %+v", g.To, ev)
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func httpServer(t *testing.T, h http.Handler) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

// TestEventStreamSwitchStory: the event stream tells the provider-switch
// story of SPEC §3 in the order it happened — mint A, run A, switch (the
// run ends), mint B, switch back, rotate A (A2 minted, A revoked, the rotation), archive → both revoked — and
// a reader that reconnects with Last-Event-ID gets exactly the rest.
func TestEventStreamSwitchStory(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, id := range []string{"A", "B"} {
		if r := e.do(post("/admin/v1/instances", `{"id":"`+id+`","driver":"inproc"}`)); r.status != 201 {
			t.Fatalf("instance %s: %s", id, r)
		}
	}
	_, next := e.stream("?thread=t1&kind=thread.created,thread.switched,thread.archived,run,credential", nil)
	must := func(req request, status int) *response {
		t.Helper()
		r := e.do(req)
		if r.status != status {
			t.Fatalf("%s %s: %s, want %d", req.method, req.path, r, status)
		}
		return r
	}
	must(post("/admin/v1/threads", `{"id":"t1","instance":"A"}`), 201)
	credA := field(t, must(post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`), 201), "credentialId")
	runA := field(t, must(post("/admin/v1/threads/t1/runs", `{"instance":"A"}`), 201), "runId")
	must(post("/admin/v1/threads/t1/switch", `{"instance":"B"}`), 200)
	credB := field(t, must(post("/admin/v1/threads/t1/provider-sessions", `{"instance":"B"}`), 201), "credentialId")
	must(post("/admin/v1/threads/t1/switch", `{"instance":"A"}`), 200)
	credA2 := field(t, must(post("/admin/v1/threads/t1/rotate", `{"instance":"A"}`), 200), "credentialId")
	must(bodyless("/admin/v1/threads/t1/archive"), 200)

	type want struct{ kind, instance, credential, run, from, reason string }
	story := []want{
		{kind: mcpruntime.RecordThreadCreated, instance: "A"},
		{kind: mcpruntime.RecordCredentialMinted, instance: "A", credential: credA},
		{kind: mcpruntime.RecordRunStarted, instance: "A", run: runA},
		{kind: mcpruntime.RecordRunEnded, instance: "A", run: runA},
		{kind: mcpruntime.RecordThreadSwitched, instance: "B", from: "A"},
		{kind: mcpruntime.RecordCredentialMinted, instance: "B", credential: credB},
		{kind: mcpruntime.RecordThreadSwitched, instance: "A", from: "B"},
		{kind: mcpruntime.RecordCredentialMinted, instance: "A", credential: credA2},
		{kind: mcpruntime.RecordCredentialRevoked, instance: "A", credential: credA, reason: "rotated"},
		{kind: mcpruntime.RecordCredentialRotated, instance: "A", credential: credA2, from: credA},
		{kind: mcpruntime.RecordThreadArchived},
		{kind: mcpruntime.RecordCredentialRevoked, reason: "archived"},
		{kind: mcpruntime.RecordCredentialRevoked, reason: "archived"},
	}
	check := func(got []sseEvent, want []want) {
		t.Helper()
		revoked := map[string]bool{}
		for i, w := range want {
			g := got[i].rec
			if g.Kind != w.kind || g.Thread != "t1" || (w.instance != "" && g.Instance != w.instance) ||
				(w.credential != "" && g.Credential != w.credential) || g.Run != w.run || g.From != w.from || g.Reason != w.reason {
				t.Fatalf("event %d = %+v, want %+v", i, g, w)
			}
			if got[i].id != strconv.FormatUint(g.ID, 10) || (i > 0 && g.ID <= got[i-1].rec.ID) {
				t.Fatalf("event %d: id %q after %d", i, got[i].id, got[i-1].rec.ID)
			}
			if w.reason == "archived" {
				revoked[g.Credential] = true
			}
			if strings.Contains(string(got[i].data), "token") || strings.Contains(string(got[i].data), "Hash") {
				t.Errorf("event %d carries a secret's field: %s", i, got[i].data)
			}
		}
		if n := len(revoked); n > 0 && (n != 2 || !revoked[credB] || !revoked[credA2]) {
			t.Errorf("archive revoked %v, want %s and %s", revoked, credB, credA2)
		}
	}
	var got []sseEvent
	for range story {
		got = append(got, next())
	}
	check(got, story)

	// Reconnected after the fourth: the same events from the fifth on,
	// with the same ids.
	_, again := e.stream("?thread=t1&kind=thread.created,thread.switched,thread.archived,run,credential", http.Header{"Last-Event-Id": {got[3].id}})
	var rest []sseEvent
	for range story[4:] {
		rest = append(rest, again())
	}
	for i := range rest {
		if rest[i].id != got[4+i].id {
			t.Fatalf("resumed event %d has id %s, want %s", i, rest[i].id, got[4+i].id)
		}
	}
	check(rest, story[4:])
}

// TestEventStreamKindFilter: ?kind= keeps kinds and families only, and a
// malformed one is 400.
func TestEventStreamKindFilter(t *testing.T) {
	e := newEnv(t, envOptions{})
	if r := e.do(post("/admin/v1/instances", `{"id":"A","driver":"inproc"}`)); r.status != 201 {
		t.Fatalf("instance: %s", r)
	}
	_, next := e.stream("?kind=credential.minted,thread.archived", nil)
	e.do(post("/admin/v1/threads", `{"id":"t1","instance":"A"}`))
	cred := field(t, e.do(post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`)), "credentialId")
	e.do(bodyless("/admin/v1/threads/t1/archive"))
	if ev := next(); ev.kind != mcpruntime.RecordCredentialMinted || ev.rec.Credential != cred {
		t.Fatalf("first = %+v, want the mint", ev)
	}
	if ev := next(); ev.kind != mcpruntime.RecordThreadArchived {
		t.Fatalf("second = %+v, want the archive (no revoke, no provider event)", ev)
	}
	for _, q := range []string{"?kind=Thread", "?kind=thread.", "?kind=.x", "?kind=a,,b", "?kind=" + strings.Repeat("a", 65), "?kind=" + strings.Repeat("a,", 32) + "a"} {
		if r := e.do(get("/admin/v1/events" + q)); r.status != http.StatusBadRequest {
			t.Errorf("%s: %s, want 400", q, r)
		}
	}
}

// stallWriter is an event stream's reader that stops reading: its first
// write after the headers blocks until release is closed.
type stallWriter struct {
	header  http.Header
	mu      sync.Mutex
	buf     bytes.Buffer
	once    sync.Once
	stalled chan struct{} // closed once a write blocks
	release chan struct{}
}

func (w *stallWriter) Header() http.Header { return w.header }
func (w *stallWriter) WriteHeader(int)     {}
func (w *stallWriter) Flush()              {}
func (w *stallWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.stalled)
		<-w.release
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestEventStreamSlowReaderDropped: a reader that stops reading never
// holds the runtime up — every write the runtime is asked for while the
// stream is stuck returns, none waits for the reader — and once the reader
// is left behind by the journal's bound its stream gets a last event
// "dropped" naming what it missed, and ends. It runs in a synctest
// bubble, whose clock moves only once everything waits: the stream's own
// timers (its linger) come before the test's minute, in every run, so a
// stream that follows on instead of ending is that minute passing, not a
// wall-clock bound.
func TestEventStreamSlowReaderDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Registered first, run last: protoactor's dead-letter throttle
		// waits out its interval on a goroutine of its own, and the bubble
		// ends only once every goroutine in it has.
		t.Cleanup(func() { time.Sleep(time.Second) })
		rt, err := mcpruntime.New(mcpruntime.Config{Journal: 16, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		srv := admin.New(rt, admin.Options{Token: adminToken, Logger: quiet()})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/admin/v1/events?after=0", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		w := &stallWriter{header: http.Header{}, stalled: make(chan struct{}), release: make(chan struct{})}
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ServeHTTP(w, req)
		}()
		const threads = 300
		for i := range threads {
			if _, err := rt.CreateThread(context.Background(), fmt.Sprintf("t%d", i), mcpruntime.ThreadOptions{}); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				<-w.stalled // the reader is stuck from the first record on
			}
		}
		close(w.release)
		select {
		case <-done:
		case <-time.After(time.Minute): // the bubble's clock
			t.Fatal("the stream did not end")
		}
		w.mu.Lock()
		out := w.buf.String()
		w.mu.Unlock()
		i := strings.LastIndex(out, "event: dropped\ndata: ")
		if i < 0 || !strings.HasSuffix(out, "\n\n") {
			t.Fatalf("stream did not end with a dropped event:\n%s", out)
		}
		var missed struct{ From, To uint64 }
		if err := json.Unmarshal([]byte(strings.TrimSpace(out[i+len("event: dropped\ndata: "):])), &missed); err != nil {
			t.Fatal(err)
		}
		// It had read a batch before its first write stuck: it writes that
		// batch, then finds itself behind the bound.
		if missed.From < 2 || missed.To < threads-16 || missed.From > missed.To {
			t.Errorf("dropped = %+v, want from after the first record to at least %d", missed, threads-16)
		}
	})
}

// TestEventStreamNoFollow: ?follow=false sends the records the journal held
// when asked — filtered as any stream — and ends, so a plain GET answers;
// a bad follow value is 400.
func TestEventStreamNoFollow(t *testing.T) {
	e := newEnv(t, envOptions{})
	if r := e.do(post("/admin/v1/instances", `{"id":"A","driver":"inproc"}`)); r.status != 201 {
		t.Fatalf("instance: %s", r)
	}
	for _, id := range []string{"t1", "t2"} {
		e.do(post("/admin/v1/threads", `{"id":"`+id+`","instance":"A"}`))
	}
	r := e.do(get("/admin/v1/events?after=0&follow=false&kind=thread.created"))
	if r.status != http.StatusOK {
		t.Fatalf("follow=false: %s", r)
	}
	var threads []string
	for _, line := range strings.Split(string(r.body), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var rec mcpruntime.Record
			if err := json.Unmarshal([]byte(data), &rec); err != nil || rec.Kind != mcpruntime.RecordThreadCreated {
				t.Fatalf("event %s (%v), want thread.created only", data, err)
			}
			threads = append(threads, rec.Thread)
		}
	}
	if strings.Join(threads, ",") != "t1,t2" {
		t.Errorf("follow=false sent threads %q, want t1,t2", threads)
	}
	if r := e.do(get("/admin/v1/events?follow=false")); r.status != http.StatusOK || strings.Contains(string(r.body), "data:") {
		t.Errorf("follow=false from now: %s, want an empty stream that ends", r)
	}
	if r := e.do(get("/admin/v1/events?follow=maybe")); r.status != http.StatusBadRequest {
		t.Errorf("follow=maybe: %s, want 400", r)
	}
}
