package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/admin"
)

// adminToken is the admin API's token in every test.
const adminToken = "test-admin-token-0123456789abcdef"

// logBuffer collects the log lines of the runtime and the admin API, to
// check that no token reaches them.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// env is a real runtime with its admin API behind httptest.NewServer.
type env struct {
	t      *testing.T
	rt     *mcpruntime.Runtime
	inproc *providertest.Inproc // the runtime's in-process driver
	ts     *httptest.Server
	mcp    *mcpruntime.MCPEndpoint // nil unless withMCP
	mcpS   *httptest.Server
	logs   *logBuffer

	vars    map[string]string // ids and tokens captured along a walk
	answers []*response       // every admin answer, in order
	minted  map[string]int    // token → index in answers of the answer that minted it
}

type envOptions struct {
	withMCP bool // mount the MCP endpoint and give it to the admin API
	drivers map[string]driver.Factory
	token   *string // admin token; nil: adminToken
	// maxThreads is the runtime's Config.MaxThreads (0: the default).
	maxThreads int
	// oauth is the runtime's Config.OAuth.
	oauth mcpruntime.OAuthConfig
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	in := &providertest.Inproc{}
	drivers := map[string]driver.Factory{driver.InprocKind: in.Factory()}
	maps.Copy(drivers, o.drivers)
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: logger, Drivers: drivers, MaxThreads: o.maxThreads, OAuth: o.oauth})
	if err != nil {
		t.Fatalf("mcpruntime.New: %v", err)
	}
	e := &env{t: t, rt: rt, inproc: in, logs: logs, vars: map[string]string{}, minted: map[string]int{}}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("Runtime.Close: %v", err)
		}
	})
	opts := admin.Options{Token: adminToken, Logger: logger}
	if o.token != nil {
		opts.Token = *o.token
	}
	if o.withMCP {
		srv, err := rt.MCPHandler(mcpruntime.MCPOptions{})
		if err != nil {
			t.Fatalf("MCPHandler: %v", err)
		}
		e.mcp, e.mcpS = srv, httptest.NewServer(srv)
		t.Cleanup(func() {
			srv.Close()
			e.mcpS.Close()
		})
		opts.MCP = srv
	}
	e.ts = httptest.NewServer(admin.New(rt, opts))
	t.Cleanup(e.ts.Close)
	return e
}

// response is one admin answer.
type response struct {
	method, path string
	status       int
	header       http.Header
	body         []byte
}

// json decodes the body as an object.
func (r *response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", r.method, r.path, r.body, err)
	}
	return m
}

func (r *response) String() string {
	return r.method + " " + r.path + " → " + http.StatusText(r.status) + " " + strings.TrimSpace(string(r.body))
}

// request is an admin request; zero fields get the defaults of a
// well-formed request.
type request struct {
	method, path string
	body         string
	contentType  *string     // nil: application/json when there is a body
	auth         *string     // nil: the admin token
	header       http.Header // added last
}

func ptr[T any](v T) *T { return &v }

// do sends req, with {name} in its path and body replaced from e.vars.
func (e *env) do(req request) *response {
	e.t.Helper()
	path, body := e.subst(req.path), e.subst(req.body)
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	hr, err := http.NewRequest(req.method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	switch {
	case req.auth != nil:
		if *req.auth != "" {
			hr.Header.Set("Authorization", *req.auth)
		}
	default:
		hr.Header.Set("Authorization", "Bearer "+adminToken)
	}
	switch {
	case req.contentType != nil:
		if *req.contentType != "" {
			hr.Header.Set("Content-Type", *req.contentType)
		}
	case body != "":
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range req.header {
		hr.Header[k] = vs
	}
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", req.method, path, err)
	}
	r := &response{method: req.method, path: path, status: res.StatusCode, header: res.Header, body: b}
	e.answers = append(e.answers, r)
	return r
}

func (e *env) subst(s string) string {
	for k, v := range e.vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

// mint records that the last answer minted tok (a raw token or a
// "Bearer <token>" value) and saves it as e.vars[name].
func (e *env) mint(name, tok string) {
	e.t.Helper()
	raw := strings.TrimPrefix(tok, "Bearer ")
	if raw == "" || raw == tok && strings.HasPrefix(tok, "Bearer") {
		e.t.Fatalf("mint %s: %q is not a token", name, tok)
	}
	if _, dup := e.minted[raw]; dup {
		e.t.Fatalf("mint %s: token shown twice", name)
	}
	e.minted[raw] = len(e.answers) - 1
	e.vars[name] = raw
}

// authenticates reports whether the token saved as name authenticates.
func (e *env) authenticates(name string) bool {
	_, err := e.rt.Authenticate(e.vars[name])
	return err == nil
}

// checkNoLeaks fails if a minted token appears in any answer but the one
// that minted it, or the admin token in any answer, or either in the log.
func (e *env) checkNoLeaks() {
	e.t.Helper()
	if len(e.minted) == 0 {
		e.t.Fatal("checkNoLeaks: no token was minted; the check would be vacuous")
	}
	logs := e.logs.String()
	for tok, at := range e.minted {
		for i, r := range e.answers {
			if i != at && bytes.Contains(r.body, []byte(tok)) {
				e.t.Errorf("answer %d (%s) contains a token minted by answer %d (%s)", i, r, at, e.answers[at])
			}
		}
		if strings.Contains(logs, tok) {
			e.t.Errorf("log contains a token minted by %s", e.answers[at])
		}
	}
	for _, r := range e.answers {
		if bytes.Contains(r.body, []byte(adminToken)) {
			e.t.Errorf("answer %s contains the admin token", r)
		}
	}
	if strings.Contains(logs, adminToken) {
		e.t.Error("log contains the admin token")
	}
}

// step is one request of a walk and what its answer must be.
type step struct {
	name string
	request
	wantStatus int
	wantCode   string // error answers: the "error" field
	check      func(t *testing.T, e *env, r *response)
}

// walk runs steps in order, each as a subtest; a failed step stops the walk,
// since later steps build on it.
func (e *env) walk(steps []step) {
	e.t.Helper()
	for _, s := range steps {
		ok := e.t.Run(s.name, func(t *testing.T) {
			r := e.do(s.request)
			if r.status != s.wantStatus {
				t.Fatalf("%s, want status %d", r, s.wantStatus)
			}
			if got := r.header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("%s: Cache-Control %q, want no-store", r, got)
			}
			if s.wantCode != "" {
				checkError(t, r, s.wantCode)
			}
			if s.check != nil {
				s.check(t, e, r)
			}
		})
		if !ok {
			e.t.FailNow()
		}
	}
}

// checkError checks an error answer: JSON {"error": code, "message": …}
// and nothing else.
func checkError(t *testing.T, r *response, code string) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", r, ct)
	}
	m := r.json(t)
	if m["error"] != code {
		t.Errorf("%s: error %v, want %q", r, m["error"], code)
	}
	if msg, _ := m["message"].(string); msg == "" {
		t.Errorf("%s: empty message", r)
	}
	if len(m) != 2 {
		t.Errorf("%s: fields %v, want exactly error and message", r, m)
	}
}

// field returns the string field name of r's JSON object.
func field(t *testing.T, r *response, name string) string {
	t.Helper()
	v, ok := r.json(t)[name].(string)
	if !ok {
		t.Fatalf("%s: no string field %q", r, name)
	}
	return v
}

// wantFields checks that r's JSON object has exactly the named fields.
func wantFields(t *testing.T, r *response, names ...string) {
	t.Helper()
	var got []string
	for k := range r.json(t) {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(names)
	if diff := cmp.Diff(names, got); diff != "" {
		t.Errorf("%s: fields (-want +got):\n%s", r, diff)
	}
}

func wantEqual(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func wantHeader(t *testing.T, r *response, name, want string) {
	t.Helper()
	if got := r.header.Get(name); got != want {
		t.Errorf("%s: %s %q, want %q", r, name, got, want)
	}
}

// wantThreadAfter checks the answer of a change of a thread: the thread as
// it is now, with status.
func wantThreadAfter(status string) func(*testing.T, *env, *response) {
	return func(t *testing.T, _ *env, r *response) {
		t.Helper()
		wantFields(t, r, "id", "status", "instance", "run", "created", "messages")
		wantEqual(t, "status", field(t, r, "status"), status)
	}
}

// wantGone checks the answer of a DELETE: {name: the id in e.vars[v] (or
// v itself), "status": status}.
func wantGone(name, v, status string) func(*testing.T, *env, *response) {
	return func(t *testing.T, e *env, r *response) {
		t.Helper()
		wantFields(t, r, name, "status")
		id := v
		if saved, ok := e.vars[v]; ok {
			id = saved
		}
		wantEqual(t, name, field(t, r, name), id)
		wantEqual(t, "status", field(t, r, "status"), status)
	}
}

// authenticates checks which saved tokens authenticate.
func authenticates(live []string, dead []string) func(*testing.T, *env, *response) {
	return func(t *testing.T, e *env, _ *response) {
		t.Helper()
		for _, name := range live {
			if !e.authenticates(name) {
				t.Errorf("token %s fails to authenticate, want it live", name)
			}
		}
		for _, name := range dead {
			if e.authenticates(name) {
				t.Errorf("token %s authenticates, want it refused", name)
			}
		}
	}
}

// waitFor polls cond until it holds. It is for effects that follow an
// answer asynchronously by design (a driver call); the deadline only
// detects a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func checks(fs ...func(*testing.T, *env, *response)) func(*testing.T, *env, *response) {
	return func(t *testing.T, e *env, r *response) {
		t.Helper()
		for _, f := range fs {
			f(t, e, r)
		}
	}
}

func post(path, body string) request      { return request{method: http.MethodPost, path: path, body: body} }
func get(path string) request             { return request{method: http.MethodGet, path: path} }
func del(path string) request             { return request{method: http.MethodDelete, path: path} }
func bodyless(path string) request        { return request{method: http.MethodPost, path: path} }
func withCT(r request, ct string) request { r.contentType = &ct; return r }

// TestRoutes walks every route of the admin API over HTTP against a real
// runtime, telling the provider-switch story of SPEC §3 along the way, with
// the error answers of each route where they arise.
func TestRoutes(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.walk([]step{
		// Instances.
		{name: "register A", request: post("/admin/v1/instances", `{"id":"A","driver":"inproc","config":{},"capabilities":["tools:read","tools:write"]}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, _ *env, r *response) {
				want := map[string]any{"id": "A", "driver": "inproc", "capabilities": []any{"tools:read", "tools:write"}}
				if diff := cmp.Diff(want, r.json(t)); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
			}},
		{name: "register B without config", request: post("/admin/v1/instances", `{"id":"B","driver":"inproc"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, _ *env, r *response) {
				if caps, ok := r.json(t)["capabilities"].([]any); !ok || len(caps) != 0 {
					t.Errorf("capabilities %v, want []", r.json(t)["capabilities"])
				}
			}},
		{name: "register A again", request: post("/admin/v1/instances", `{"id":"A","driver":"inproc"}`),
			wantStatus: http.StatusConflict, wantCode: "instance_exists"},
		{name: "register unknown driver", request: post("/admin/v1/instances", `{"id":"C","driver":"nope"}`),
			wantStatus: http.StatusBadRequest, wantCode: "unknown_driver"},
		{name: "register invalid id", request: post("/admin/v1/instances", `{"id":"a b","driver":"inproc"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_id"},
		{name: "register without driver", request: post("/admin/v1/instances", `{"id":"C"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},

		// Threads.
		{name: "create t1 on A", request: post("/admin/v1/threads", `{"id":"t1","instance":"A"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, _ *env, r *response) {
				wantHeader(t, r, "Location", "/admin/v1/threads/t1")
				wantFields(t, r, "id", "status", "instance", "run", "created", "messages")
				m := r.json(t)
				if m["id"] != "t1" || m["status"] != "active" || m["instance"] != "A" || m["run"] != nil {
					t.Errorf("thread %v, want t1 active on A without run", m)
				}
				if msgs, ok := m["messages"].([]any); !ok || len(msgs) != 0 {
					t.Errorf("messages %v, want []", m["messages"])
				}
			}},
		{name: "create t1 again", request: post("/admin/v1/threads", `{"id":"t1"}`),
			wantStatus: http.StatusConflict, wantCode: "thread_exists"},
		{name: "create on unknown instance", request: post("/admin/v1/threads", `{"id":"t9","instance":"nope"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_instance"},
		{name: "create with invalid id", request: post("/admin/v1/threads", `{"id":"t/1"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_id"},
		{name: "get t1", request: get("/admin/v1/threads/t1"), wantStatus: http.StatusOK,
			check: func(t *testing.T, _ *env, r *response) {
				wantEqual(t, "id", field(t, r, "id"), "t1")
				wantEqual(t, "instance", field(t, r, "instance"), "A")
			}},
		{name: "get unknown thread", request: get("/admin/v1/threads/nope"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "get invalid thread id", request: get("/admin/v1/threads/a%20b"),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_id"},

		// The provider-switch story.
		{name: "open A", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				wantFields(t, r, "providerSessionId", "instance", "driver", "credentialId", "endpoint", "authorization", "capabilities", "reused")
				wantEqual(t, "driver", field(t, r, "driver"), "inproc")
				e.mint("tokA", field(t, r, "authorization"))
				e.vars["psA"], e.vars["credA"] = field(t, r, "providerSessionId"), field(t, r, "credentialId")
				wantEqual(t, "endpoint", field(t, r, "endpoint"), mcpruntime.DefaultEndpoint)
				wantHeader(t, r, "Location", "/admin/v1/provider-sessions/"+e.vars["psA"])
				if diff := cmp.Diff([]any{"tools:read", "tools:write"}, r.json(t)["capabilities"]); diff != "" {
					t.Errorf("capabilities (-want +got):\n%s", diff)
				}
				if !e.authenticates("tokA") {
					t.Error("A's token does not authenticate")
				}
				// The driver was given the same token.
				if got := e.inproc.Session(e.vars["psA"]).Authorizations(); !slices.Equal(got, []string{"Bearer " + e.vars["tokA"]}) {
					t.Error("the inproc session was not given the minted authorization")
				}
			}},
		{name: "open A again is reused", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusOK, check: checkReused("psA", "credA")},
		{name: "open on unknown thread", request: post("/admin/v1/threads/nope/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "open unknown instance", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"nope"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_instance"},
		{name: "open invalid instance id", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"a b"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_id"},
		{name: "open without instance", request: post("/admin/v1/threads/t1/provider-sessions", `{}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "start run of A", request: post("/admin/v1/threads/t1/runs", `{"instance":"A"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				wantFields(t, r, "runId")
				e.vars["runA"] = field(t, r, "runId")
				wantHeader(t, r, "Location", "/admin/v1/threads/t1/runs/current")
			}},
		{name: "start a second run", request: post("/admin/v1/threads/t1/runs", `{"instance":"A"}`),
			wantStatus: http.StatusConflict, wantCode: "run_active"},
		{name: "start run of B while A is current", request: post("/admin/v1/threads/t1/runs", `{"instance":"B"}`),
			wantStatus: http.StatusConflict, wantCode: "not_current_instance"},
		{name: "start run on unknown thread", request: post("/admin/v1/threads/nope/runs", `{"instance":"A"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "get t1 shows the run", request: get("/admin/v1/threads/t1"), wantStatus: http.StatusOK,
			check: func(t *testing.T, e *env, r *response) {
				run, _ := r.json(t)["run"].(map[string]any)
				if run["id"] != e.vars["runA"] || run["instance"] != "A" {
					t.Errorf("run %v, want %s of A", run, e.vars["runA"])
				}
			}},
		{name: "switch to B", request: post("/admin/v1/threads/t1/switch", `{"instance":"B"}`),
			wantStatus: http.StatusOK, check: func(t *testing.T, e *env, r *response) {
				want := map[string]any{"instance": "B", "previous": "A", "endedRun": e.vars["runA"]}
				if diff := cmp.Diff(want, r.json(t)); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
			}},
		{name: "the switch ended the run", request: del("/admin/v1/threads/t1/runs/current"),
			wantStatus: http.StatusConflict, wantCode: "no_run"},
		{name: "switch to unknown instance", request: post("/admin/v1/threads/t1/switch", `{"instance":"nope"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_instance"},
		{name: "switch unknown thread", request: post("/admin/v1/threads/nope/switch", `{"instance":"A"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "open B", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"B"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				e.mint("tokB", field(t, r, "authorization"))
				e.vars["psB"], e.vars["credB"] = field(t, r, "providerSessionId"), field(t, r, "credentialId")
				if e.vars["psB"] == e.vars["psA"] || e.vars["credB"] == e.vars["credA"] {
					t.Error("B got A's provider session or credential")
				}
				authenticates([]string{"tokA", "tokB"}, nil)(t, e, r)
			}},
		{name: "start run of B", request: post("/admin/v1/threads/t1/runs", `{"instance":"B"}`),
			wantStatus: http.StatusCreated},
		{name: "end B's run", request: del("/admin/v1/threads/t1/runs/current"),
			wantStatus: http.StatusOK, check: func(t *testing.T, e *env, r *response) {
				wantThreadAfter("active")(t, e, r)
				if run := r.json(t)["run"]; run != nil {
					t.Errorf("run %v after ending it, want null", run)
				}
			}},
		{name: "end run on unknown thread", request: del("/admin/v1/threads/nope/runs/current"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "switch back to A", request: post("/admin/v1/threads/t1/switch", `{"instance":"A"}`),
			wantStatus: http.StatusOK, check: func(t *testing.T, _ *env, r *response) {
				wantFields(t, r, "instance", "previous") // no run ended
				wantEqual(t, "previous", field(t, r, "previous"), "B")
			}},
		{name: "back to A reuses A's session", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusOK, check: checks(checkReused("psA", "credA"), authenticates([]string{"tokA", "tokB"}, nil))},
		{name: "rotate A", request: post("/admin/v1/threads/t1/rotate", `{"instance":"A"}`),
			wantStatus: http.StatusOK, check: func(t *testing.T, e *env, r *response) {
				wantFields(t, r, "credentialId", "authorization")
				e.mint("tokA2", field(t, r, "authorization"))
				e.vars["credA2"] = field(t, r, "credentialId")
				authenticates([]string{"tokA2", "tokB"}, []string{"tokA"})(t, e, r)
				// A's session was re-bound to the new token.
				auths := e.inproc.Session(e.vars["psA"]).Authorizations()
				if len(auths) == 0 || auths[len(auths)-1] != "Bearer "+e.vars["tokA2"] {
					t.Error("A's session was not re-bound to the rotated credential")
				}
			}},
		{name: "open A after the rotation", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusOK, check: checkReused("psA", "credA2")},
		{name: "rotate unknown instance", request: post("/admin/v1/threads/t1/rotate", `{"instance":"nope"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_instance"},
		{name: "rotate unknown thread", request: post("/admin/v1/threads/nope/rotate", `{"instance":"A"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "release B", request: del("/admin/v1/provider-sessions/{psB}"),
			wantStatus: http.StatusOK, check: checks(wantGone("providerSessionId", "psB", "released"), authenticates([]string{"tokA2"}, []string{"tokB"}))},
		{name: "release B again", request: del("/admin/v1/provider-sessions/{psB}"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_provider_session"},
		{name: "release unknown provider session", request: del("/admin/v1/provider-sessions/ps_nope"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_provider_session"},
		{name: "detach", request: bodyless("/admin/v1/threads/t1/detach"),
			wantStatus: http.StatusOK, check: func(t *testing.T, e *env, r *response) {
				wantThreadAfter("active")(t, e, r)
				// The driver is told after the answer: its Detach is queued
				// behind the session's earlier calls.
				s := e.inproc.Session(e.vars["psA"])
				waitFor(t, "A's session detached", func() bool { return len(s.Attached()) == 0 })
				authenticates([]string{"tokA2"}, nil)(t, e, r) // a detach revokes nothing
			}},
		{name: "detach unknown thread", request: bodyless("/admin/v1/threads/nope/detach"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "open A after detach re-attaches", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusOK, check: checkReused("psA", "credA2")},
		{name: "list threads", request: get("/admin/v1/threads"), wantStatus: http.StatusOK,
			check: func(t *testing.T, _ *env, r *response) {
				var got struct{ Threads []map[string]any }
				if err := json.Unmarshal(r.body, &got); err != nil {
					t.Fatal(err)
				}
				if len(got.Threads) != 1 || got.Threads[0]["id"] != "t1" || got.Threads[0]["instance"] != "A" {
					t.Errorf("threads %v, want t1 on A", got.Threads)
				}
				if _, ok := got.Threads[0]["messages"]; ok {
					t.Error("the list carries messages; want summaries")
				}
			}},
		{name: "no MCP sessions", request: get("/admin/v1/sessions"), wantStatus: http.StatusOK,
			check: func(t *testing.T, _ *env, r *response) {
				wantEqual(t, "body", strings.TrimSpace(string(r.body)), `{"sessions":[]}`)
			}},

		// Archive.
		{name: "create t2", request: post("/admin/v1/threads", `{"id":"t2"}`), wantStatus: http.StatusCreated,
			check: func(t *testing.T, _ *env, r *response) { wantEqual(t, "instance", field(t, r, "instance"), "") }},
		{name: "open A on t2", request: post("/admin/v1/threads/t2/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				e.mint("tokT2", field(t, r, "authorization"))
			}},
		{name: "archive t2", request: bodyless("/admin/v1/threads/t2/archive"),
			wantStatus: http.StatusOK, check: checks(wantThreadAfter("archived"), authenticates([]string{"tokA2"}, []string{"tokT2"}))},
		{name: "archive t2 again", request: bodyless("/admin/v1/threads/t2/archive"), wantStatus: http.StatusOK, check: wantThreadAfter("archived")},
		{name: "archived t2", request: get("/admin/v1/threads/t2"), wantStatus: http.StatusOK,
			check: func(t *testing.T, _ *env, r *response) { wantEqual(t, "status", field(t, r, "status"), "archived") }},
		{name: "open on archived", request: post("/admin/v1/threads/t2/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusConflict, wantCode: "thread_archived"},
		{name: "switch archived", request: post("/admin/v1/threads/t2/switch", `{"instance":"B"}`),
			wantStatus: http.StatusConflict, wantCode: "thread_archived"},
		{name: "rotate archived", request: post("/admin/v1/threads/t2/rotate", `{"instance":"A"}`),
			wantStatus: http.StatusConflict, wantCode: "thread_archived"},
		{name: "run on archived", request: post("/admin/v1/threads/t2/runs", `{"instance":"A"}`),
			wantStatus: http.StatusConflict, wantCode: "thread_archived"},
		{name: "end run on archived", request: del("/admin/v1/threads/t2/runs/current"),
			wantStatus: http.StatusConflict, wantCode: "thread_archived"},
		{name: "archive unknown thread", request: bodyless("/admin/v1/threads/nope/archive"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},

		// Delete: every token of the thread stops authenticating.
		{name: "delete t1", request: del("/admin/v1/threads/t1"),
			wantStatus: http.StatusOK, check: checks(wantGone("id", "t1", "deleted"), authenticates(nil, []string{"tokA", "tokA2", "tokB"}))},
		{name: "t1 is gone", request: get("/admin/v1/threads/t1"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "delete t1 again", request: del("/admin/v1/threads/t1"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_thread"},
		{name: "the id can be used again", request: post("/admin/v1/threads", `{"id":"t1"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, _ *env, r *response) {
				wantEqual(t, "instance", field(t, r, "instance"), "")
			}},

		// Client grants.
		{name: "issue client", request: post("/admin/v1/clients", `{"label":"ops","access":"read-only"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				wantFields(t, r, "clientId", "token")
				e.vars["cl"] = field(t, r, "clientId")
				e.mint("cl1", field(t, r, "token"))
				wantHeader(t, r, "Location", "/admin/v1/clients/"+e.vars["cl"])
				p, err := e.rt.Authenticate(e.vars["cl1"])
				if err != nil || p.Client != e.vars["cl"] || p.Access != "read-only" {
					t.Errorf("client token authenticates as %+v, %v; want read-only client %s", p, err, e.vars["cl"])
				}
			}},
		{name: "issue client with bad access", request: post("/admin/v1/clients", `{"label":"x","access":"admin"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_argument"},
		{name: "issue client without access", request: post("/admin/v1/clients", `{"label":"x"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "refresh without body", request: bodyless("/admin/v1/clients/{cl}/refresh"),
			wantStatus: http.StatusOK, check: func(t *testing.T, e *env, r *response) {
				wantFields(t, r, "token")
				e.mint("cl2", field(t, r, "token"))
				authenticates([]string{"cl1", "cl2"}, nil)(t, e, r)
			}},
		{name: "refresh with empty object", request: post("/admin/v1/clients/{cl}/refresh", `{}`),
			wantStatus: http.StatusOK, check: func(t *testing.T, e *env, r *response) {
				e.mint("cl3", field(t, r, "token"))
				authenticates([]string{"cl1", "cl2", "cl3"}, nil)(t, e, r)
			}},
		{name: "refresh revoking previous", request: post("/admin/v1/clients/{cl}/refresh", `{"revokePrevious":true}`),
			wantStatus: http.StatusOK, check: func(t *testing.T, e *env, r *response) {
				e.mint("cl4", field(t, r, "token"))
				authenticates([]string{"cl4"}, []string{"cl1", "cl2", "cl3"})(t, e, r)
			}},
		{name: "refresh with unknown field", request: post("/admin/v1/clients/{cl}/refresh", `{"revoke":true}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "refresh with wrong content type", request: withCT(post("/admin/v1/clients/{cl}/refresh", `{}`), "text/plain"),
			wantStatus: http.StatusUnsupportedMediaType, wantCode: "unsupported_media_type"},
		{name: "refresh unknown client", request: bodyless("/admin/v1/clients/cl_nope/refresh"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_client"},
		{name: "revoke client", request: del("/admin/v1/clients/{cl}"),
			wantStatus: http.StatusOK, check: checks(wantGone("clientId", "cl", "revoked"), authenticates(nil, []string{"cl4"}))},
		{name: "revoke client again", request: del("/admin/v1/clients/{cl}"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_client"},
		{name: "refresh revoked client", request: bodyless("/admin/v1/clients/{cl}/refresh"),
			wantStatus: http.StatusNotFound, wantCode: "unknown_client"},
	})
	e.checkNoLeaks()
}

// checkReused checks a 200 answer to an open that found the pair's live
// provider session: the saved ids, and no authorization.
func checkReused(ps, cred string) func(*testing.T, *env, *response) {
	return func(t *testing.T, e *env, r *response) {
		t.Helper()
		wantFields(t, r, "providerSessionId", "instance", "driver", "credentialId", "endpoint", "capabilities", "reused")
		wantEqual(t, "providerSessionId", field(t, r, "providerSessionId"), e.vars[ps])
		wantEqual(t, "credentialId", field(t, r, "credentialId"), e.vars[cred])
		if r.json(t)["reused"] != true {
			t.Errorf("%s: reused is not true", r)
		}
	}
}

// TestAuth checks that every route needs the admin token; a path that
// names no route is 404 with or without one.
func TestAuth(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name      string
		auth      string
		path      string
		want      int
		challenge string // WWW-Authenticate of a 401
	}{
		{"no header", "", "/admin/v1/threads", 401, `Bearer realm="admin"`},
		{"wrong token", "Bearer nope", "/admin/v1/threads", 401, `Bearer realm="admin", error="invalid_token"`},
		{"token prefix", "Bearer " + adminToken[:len(adminToken)-1], "/admin/v1/threads", 401, `Bearer realm="admin", error="invalid_token"`},
		{"token with suffix", "Bearer " + adminToken + "x", "/admin/v1/threads", 401, `Bearer realm="admin", error="invalid_token"`},
		{"basic scheme", "Basic " + adminToken, "/admin/v1/threads", 401, `Bearer realm="admin"`},
		{"bare token", adminToken, "/admin/v1/threads", 401, `Bearer realm="admin"`},
		{"empty bearer", "Bearer ", "/admin/v1/threads", 401, `Bearer realm="admin"`},
		{"unknown route without token", "", "/admin/v1/nope", 404, ""},
		{"unknown route with wrong token", "Bearer nope", "/nope", 404, ""},
		{"dot segment without token", "", "/admin/v1/threads/..", 404, ""},
		{"right token", "Bearer " + adminToken, "/admin/v1/threads", 200, ""},
		{"scheme is case-insensitive", "bearer " + adminToken, "/admin/v1/threads", 200, ""},
	}
	var bodies []string
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			r := e.do(request{method: http.MethodGet, path: test.path, auth: &test.auth})
			if r.status != test.want {
				t.Fatalf("%s, want %d", r, test.want)
			}
			wantHeader(t, r, "WWW-Authenticate", test.challenge)
			wantHeader(t, r, "Cache-Control", "no-store")
			if test.want == 401 {
				checkError(t, r, "unauthorized")
				bodies = append(bodies, string(r.body))
			}
		})
	}
	// A missing and a wrong token are told apart only by the challenge.
	for _, b := range bodies[1:] {
		if b != bodies[0] {
			t.Errorf("401 bodies differ: %q and %q", bodies[0], b)
		}
	}
	if strings.Contains(e.logs.String(), adminToken[:16]) {
		t.Error("the log contains (part of) a presented token")
	}
}

// TestEmptyTokenRefusesAll checks that an admin API without a token is
// closed, not open.
func TestEmptyTokenRefusesAll(t *testing.T) {
	e := newEnv(t, envOptions{token: ptr("")})
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		r := e.do(request{method: http.MethodGet, path: "/admin/v1/threads", auth: &auth})
		if r.status != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %s, want 401", auth, r)
		}
	}
}

// TestBodies checks the strict decoding of request bodies.
func TestBodies(t *testing.T) {
	e := newEnv(t, envOptions{})
	big := `{"id":"` + strings.Repeat("x", admin.MaxBodyBytes) + `"}`
	tests := []struct {
		name        string
		body        string
		contentType *string
		want        int
		code        string
	}{
		{"well-formed", `{"id":"ok1"}`, nil, 201, ""},
		{"charset parameter", `{"id":"ok2"}`, ptr("application/json; charset=utf-8"), 201, ""},
		{"no content type", `{"id":"x"}`, ptr(""), 415, "unsupported_media_type"},
		{"text/plain", `{"id":"x"}`, ptr("text/plain"), 415, "unsupported_media_type"},
		{"form", `id=x`, ptr("application/x-www-form-urlencoded"), 415, "unsupported_media_type"},
		{"malformed content type", `{"id":"x"}`, ptr("application/json; ="), 415, "unsupported_media_type"},
		{"empty body", ``, ptr("application/json"), 400, "invalid_request"},
		{"empty body without content type", ``, nil, 415, "unsupported_media_type"},
		{"malformed JSON", `{"id":`, nil, 400, "invalid_request"},
		{"not an object", `["x"]`, nil, 400, "invalid_request"},
		{"null", `null`, nil, 400, "invalid_request"},
		{"wrong type", `{"id":5}`, nil, 400, "invalid_request"},
		{"unknown field", `{"id":"x","colour":"red"}`, nil, 400, "invalid_request"},
		{"trailing data", `{"id":"x"} {"id":"y"}`, nil, 400, "invalid_request"},
		{"trailing garbage", `{"id":"x"}]`, nil, 400, "invalid_request"},
		{"missing id", `{"instance":"A"}`, nil, 400, "invalid_request"},
		{"empty id", `{"id":""}`, nil, 400, "invalid_request"},
		{"too large", big, nil, 413, "body_too_large"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			r := e.do(request{method: http.MethodPost, path: "/admin/v1/threads", body: test.body, contentType: test.contentType})
			if r.status != test.want {
				t.Fatalf("%s, want %d", r, test.want)
			}
			if test.code != "" {
				checkError(t, r, test.code)
				// The message speaks of the request, not of Go types.
				if msg := field(t, r, "message"); strings.Contains(msg, "Go ") || strings.Contains(msg, "Request") {
					t.Errorf("message %q names Go internals", msg)
				}
			}
		})
	}
	// Only the two well-formed requests created a thread.
	ts, err := e.rt.Threads(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, th := range ts {
		ids = append(ids, th.ID)
	}
	if diff := cmp.Diff([]string{"ok1", "ok2"}, ids); diff != "" {
		t.Errorf("threads (-want +got):\n%s", diff)
	}
}

// TestRouting checks the answers of the router itself: unknown routes,
// wrong methods, OPTIONS.
func TestRouting(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name   string
		method string
		path   string
		want   int
		code   string
		allow  string
	}{
		{"unknown route", "GET", "/admin/v1/nope", 404, "not_found", ""},
		{"root", "GET", "/", 404, "not_found", ""},
		{"trailing slash is not redirected", "GET", "/admin/v1/threads/", 404, "not_found", ""},
		{"case is not fixed", "GET", "/Admin/v1/threads", 404, "not_found", ""},
		{"too deep", "GET", "/admin/v1/threads/t1/runs/current/x", 404, "not_found", ""},
		{"GET instances", "GET", "/admin/v1/instances", 405, "method_not_allowed", "OPTIONS, POST"},
		{"PUT thread", "PUT", "/admin/v1/threads/t1", 405, "method_not_allowed", "DELETE, GET, OPTIONS"},
		{"PATCH threads", "PATCH", "/admin/v1/threads", 405, "method_not_allowed", "GET, OPTIONS, POST"},
		{"GET switch", "GET", "/admin/v1/threads/t1/switch", 405, "method_not_allowed", "OPTIONS, POST"},
		{"POST current run", "POST", "/admin/v1/threads/t1/runs/current", 405, "method_not_allowed", "DELETE, OPTIONS"},
		{"GET provider session", "GET", "/admin/v1/provider-sessions/ps_1", 405, "method_not_allowed", "DELETE, OPTIONS"},
		{"DELETE sessions", "DELETE", "/admin/v1/sessions", 405, "method_not_allowed", "GET, OPTIONS"},
		{"OPTIONS", "OPTIONS", "/admin/v1/threads/t1", 204, "", "DELETE, GET, OPTIONS"},
		// Paths a cleaning router would rewrite are answered as they are.
		{"dot-dot id", "GET", "/admin/v1/threads/..", 404, "not_found", ""},
		{"dot id", "DELETE", "/admin/v1/threads/.", 404, "not_found", ""},
		{"escaped dot-dot id", "GET", "/admin/v1/threads/%2E%2E", 404, "not_found", ""},
		{"dot-dot inside", "GET", "/admin/v1/threads/t1/../t2", 404, "not_found", ""},
		{"double slash", "GET", "/admin//v1/threads", 404, "not_found", ""},
		{"dot-dot run", "DELETE", "/admin/v1/threads/../runs/current", 404, "not_found", ""},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			r := e.do(request{method: test.method, path: test.path})
			if r.status != test.want {
				t.Fatalf("%s, want %d", r, test.want)
			}
			wantHeader(t, r, "Allow", test.allow)
			if test.code != "" {
				checkError(t, r, test.code)
			}
		})
	}
}

// gateDriver is a provider kind whose Open blocks until release is closed,
// to hold an open in flight.
type gateDriver struct {
	entered chan struct{} // receives once per Open that started
	release chan struct{}
}

func (d *gateDriver) factory() driver.Factory {
	return func(string, json.RawMessage) (driver.Driver, error) { return d, nil }
}

func (d *gateDriver) MultiThread() bool { return false }

func (d *gateDriver) Open(ctx context.Context, _ driver.OpenRequest) (driver.Session, error) {
	d.entered <- struct{}{}
	select {
	case <-d.release:
		return gateSession{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type gateSession struct{}

func (gateSession) Attach(context.Context, driver.Binding) error { return nil }
func (gateSession) Detach(context.Context, string) error         { return nil }
func (gateSession) Close(context.Context) error                  { return nil }

// TestBusy checks that rotating a pair whose provider session is being
// opened answers 409 busy, and that the open then completes with 201 for
// the first asker and 200 for one that asked meanwhile.
func TestBusy(t *testing.T) {
	gate := &gateDriver{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, envOptions{drivers: map[string]driver.Factory{"gate": gate.factory()}})
	e.walk([]step{
		{name: "register", request: post("/admin/v1/instances", `{"id":"G","driver":"gate"}`), wantStatus: http.StatusCreated},
		{name: "create", request: post("/admin/v1/threads", `{"id":"t1","instance":"G"}`), wantStatus: http.StatusCreated},
	})
	// e.do is not safe for concurrent use: the background open uses a
	// client of its own.
	type result struct {
		status int
		body   map[string]any
		err    error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/admin/v1/threads/t1/provider-sessions", strings.NewReader(`{"instance":"G"}`))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer res.Body.Close()
		var m map[string]any
		err = json.NewDecoder(res.Body).Decode(&m)
		done <- result{status: res.StatusCode, body: m, err: err}
	}()
	select {
	case <-gate.entered:
	case <-time.After(time.Minute): // detects a hang only
		t.Fatal("the driver's Open was not called")
	}
	e.walk([]step{
		{name: "rotate while opening", request: post("/admin/v1/threads/t1/rotate", `{"instance":"G"}`),
			wantStatus: http.StatusConflict, wantCode: "busy"},
	})
	close(gate.release)
	res := <-done
	if res.err != nil {
		t.Fatalf("open: %v", res.err)
	}
	if res.status != http.StatusCreated || res.body["authorization"] == nil {
		t.Fatalf("open = %d %v, want 201 with an authorization", res.status, res.body)
	}
	e.walk([]step{
		{name: "open again", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"G"}`),
			wantStatus: http.StatusOK, check: func(t *testing.T, _ *env, r *response) {
				wantEqual(t, "providerSessionId", field(t, r, "providerSessionId"), res.body["providerSessionId"].(string))
			}},
	})
}

// TestSessions checks GET /admin/v1/sessions, from a live MCP endpoint and
// from the store alone, and that it shows no token.
func TestSessions(t *testing.T) {
	e := newEnv(t, envOptions{withMCP: true})
	e.walk([]step{
		{name: "register", request: post("/admin/v1/instances", `{"id":"A","driver":"inproc"}`), wantStatus: http.StatusCreated},
		{name: "create", request: post("/admin/v1/threads", `{"id":"t1","instance":"A"}`), wantStatus: http.StatusCreated},
		{name: "open", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				e.mint("tok", field(t, r, "authorization"))
				e.vars["cred"] = field(t, r, "credentialId")
			}},
	})
	sid := initialize(t, e.mcpS.URL+"/mcp", e.vars["tok"])

	wantSession := func(busyKnown bool) func(*testing.T, *env, *response) {
		return func(t *testing.T, e *env, r *response) {
			var got struct{ Sessions []map[string]any }
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatal(err)
			}
			if len(got.Sessions) != 1 {
				t.Fatalf("sessions %v, want one", got.Sessions)
			}
			s := got.Sessions[0]
			if s["id"] != sid || s["owner"] != "cred:"+e.vars["cred"] {
				t.Errorf("session %v, want %s owned by cred:%s", s, sid, e.vars["cred"])
			}
			for _, k := range []string{"created", "lastActive"} {
				if ts, _ := s[k].(string); ts == "" {
					t.Errorf("session has no %s: %v", k, s)
				} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
					t.Errorf("session %s %q: %v", k, ts, err)
				}
			}
			keys := slices.Sorted(maps.Keys(s))
			want := []string{"created", "id", "lastActive", "owner"}
			if busyKnown {
				want = []string{"busy", "created", "id", "lastActive", "owner"}
			}
			if !slices.Equal(keys, want) {
				t.Errorf("session members %v, want %v", keys, want)
			}
			busy, ok := s["busy"]
			switch {
			case busyKnown && busy != false:
				t.Errorf("busy %v, want false", busy)
			case !busyKnown && ok:
				t.Errorf("busy %v from the store, want it absent", busy)
			}
		}
	}
	e.walk([]step{{name: "list from the endpoint", request: get("/admin/v1/sessions"), wantStatus: http.StatusOK, check: wantSession(true)}})

	// The same runtime, listed by an admin API without the endpoint.
	storeOnly := httptest.NewServer(admin.New(e.rt, admin.Options{Token: adminToken}))
	defer storeOnly.Close()
	saved := e.ts
	e.ts = storeOnly
	e.walk([]step{{name: "list from the store", request: get("/admin/v1/sessions"), wantStatus: http.StatusOK, check: wantSession(false)}})
	e.ts = saved
	e.checkNoLeaks()
}

// initialize opens an MCP session for tok and returns its id.
func initialize(t *testing.T, url, tok string) string {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"admin-test","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	sid := res.Header.Get("Mcp-Session-Id")
	if res.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize = %d, session %q; want 200 and an id", res.StatusCode, sid)
	}
	return sid
}

// TestDriverErrors: a config the driver refuses is the caller's mistake
// (400), a driver that fails to open is an upstream failure (502); neither
// is a 500.
func TestDriverErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.walk([]step{
		{name: "config the driver refuses", request: post("/admin/v1/instances", `{"id":"A","driver":"inproc","config":{"colour":"red"}}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_driver_config"},
		{name: "register", request: post("/admin/v1/instances", `{"id":"A","driver":"inproc"}`), wantStatus: http.StatusCreated},
		{name: "create", request: post("/admin/v1/threads", `{"id":"t1","instance":"A"}`), wantStatus: http.StatusCreated},
	})
	e.inproc.FailNextOpen("A", errors.New("no such binary"))
	e.walk([]step{
		{name: "open fails", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"A"}`),
			wantStatus: http.StatusBadGateway, wantCode: "provider_open_failed"},
	})
}

// TestClosedRuntime checks that a closed runtime answers 503, not 500.
func TestClosedRuntime(t *testing.T) {
	e := newEnv(t, envOptions{})
	if err := e.rt.Close(); err != nil {
		t.Fatal(err)
	}
	e.walk([]step{
		{name: "list threads", request: get("/admin/v1/threads"), wantStatus: http.StatusServiceUnavailable, wantCode: "unavailable"},
		{name: "create thread", request: post("/admin/v1/threads", `{"id":"t1"}`), wantStatus: http.StatusServiceUnavailable, wantCode: "unavailable"},
		{name: "issue client", request: post("/admin/v1/clients", `{"access":"read-only"}`), wantStatus: http.StatusServiceUnavailable, wantCode: "unavailable"},
	})
}

// TestConcurrentOpens checks that concurrent opens of one pair mint once:
// exactly one answer is 201 with an authorization, the others 200 with the
// same provider session and none.
func TestConcurrentOpens(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.walk([]step{
		{name: "register", request: post("/admin/v1/instances", `{"id":"A","driver":"inproc"}`), wantStatus: http.StatusCreated},
		{name: "create", request: post("/admin/v1/threads", `{"id":"t1","instance":"A"}`), wantStatus: http.StatusCreated},
	})
	const n = 8
	type result struct {
		status int
		body   map[string]any
		err    error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/admin/v1/threads/t1/provider-sessions", strings.NewReader(`{"instance":"A"}`))
			req.Header.Set("Authorization", "Bearer "+adminToken)
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				results[i].err = err
				return
			}
			defer res.Body.Close()
			results[i].status = res.StatusCode
			results[i].err = json.NewDecoder(res.Body).Decode(&results[i].body)
		})
	}
	wg.Wait()
	var created int
	sessions := map[any]bool{}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("open %d: %v", i, r.err)
		}
		_, hasAuth := r.body["authorization"]
		switch {
		case r.status == http.StatusCreated && hasAuth:
			created++
		case r.status == http.StatusOK && !hasAuth:
		default:
			t.Errorf("open %d = %d %v, want 201 with authorization or 200 without", i, r.status, r.body)
		}
		sessions[r.body["providerSessionId"]] = true
	}
	if created != 1 || len(sessions) != 1 {
		t.Errorf("%d answers minted, %d provider sessions; want 1 and 1", created, len(sessions))
	}
}
