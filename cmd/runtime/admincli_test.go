package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// fakeAdmin is an httptest stand-in for the admin API: it records each
// request and answers what the test says.
type fakeAdmin struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []fakeReq
	status int
	answer string
}

type fakeReq struct {
	Method, Path, Auth, ContentType string
	Body                            any // decoded JSON, nil if none
}

func newFakeAdmin(t *testing.T) *fakeAdmin {
	f := &fakeAdmin{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		path := r.URL.EscapedPath()
		if r.URL.RawQuery != "" {
			path += "?" + r.URL.RawQuery
		}
		req := fakeReq{Method: r.Method, Path: path, Auth: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type")}
		if len(b) > 0 {
			if err := json.Unmarshal(b, &req.Body); err != nil {
				req.Body = "not JSON: " + string(b)
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		status, answer := f.status, f.answer
		f.mu.Unlock()
		if answer != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAdmin) respond(status int, answer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.answer, f.reqs = status, answer, nil
}

func (f *fakeAdmin) requests() []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeReq(nil), f.reqs...)
}

func TestAdminCLIRequests(t *testing.T) {
	f := newFakeAdmin(t)
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "admintok", "RUNTIME_ADMIN_URL": f.URL}
	obj := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		args   string
		method string
		path   string
		body   any
		status int
		answer string
	}{
		{"instance create codex --driver inproc", "POST", "/admin/v1/instances", obj("id", "codex", "driver", "inproc"), 201, `{"id":"codex"}`},
		{"instance create codex", "POST", "/admin/v1/instances", obj("id", "codex", "driver", "inproc"), 201, `{}`},
		{`instance create x --driver exec --driver-config {"cmd":["a"]} --capabilities net,fs`, "POST", "/admin/v1/instances",
			obj("id", "x", "driver", "exec", "config", obj("cmd", []any{"a"}), "capabilities", []any{"net", "fs"}), 201, `{}`},
		{"thread create t1", "POST", "/admin/v1/threads", obj("id", "t1"), 201, `{"id":"t1"}`},
		{"thread create t1 --instance codex", "POST", "/admin/v1/threads", obj("id", "t1", "instance", "codex"), 201, `{"id":"t1"}`},
		{"thread list", "GET", "/admin/v1/threads", nil, 200, `{"threads":[]}`},
		{"thread list --limit 5", "GET", "/admin/v1/threads?limit=5", nil, 200, `{"threads":[],"nextCursor":"c1.x"}`},
		{"thread list --cursor c1.x", "GET", "/admin/v1/threads?cursor=c1.x", nil, 200, `{"threads":[]}`},
		{"thread get t1", "GET", "/admin/v1/threads/t1", nil, 200, `{"id":"t1"}`},
		{"thread get a:b@c", "GET", "/admin/v1/threads/a:b@c", nil, 200, `{}`},
		{"thread switch t1 claude", "POST", "/admin/v1/threads/t1/switch", obj("instance", "claude"), 200, `{"instance":"claude"}`},
		{"thread rotate t1 codex", "POST", "/admin/v1/threads/t1/rotate", obj("instance", "codex"), 200, `{"authorization":"Bearer x"}`},
		{"thread detach t1", "POST", "/admin/v1/threads/t1/detach", nil, 200, `{"id":"t1","status":"active"}`},
		{"thread archive t1", "POST", "/admin/v1/threads/t1/archive", nil, 200, `{"id":"t1","status":"archived"}`},
		{"thread delete t1", "DELETE", "/admin/v1/threads/t1", nil, 200, `{"id":"t1","status":"deleted"}`},
		{"provider-session open t1 codex", "POST", "/admin/v1/threads/t1/provider-sessions", obj("instance", "codex"), 201, `{"providerSessionId":"ps_1"}`},
		{"provider-session release ps_1", "DELETE", "/admin/v1/provider-sessions/ps_1", nil, 200, `{"providerSessionId":"ps_1","status":"released"}`},
		// The old name, a hidden alias of provider-session.
		{"session open t1 codex", "POST", "/admin/v1/threads/t1/provider-sessions", obj("instance", "codex"), 201, `{"providerSessionId":"ps_1"}`},
		{"session release ps_1", "DELETE", "/admin/v1/provider-sessions/ps_1", nil, 200, `{"providerSessionId":"ps_1","status":"released"}`},
		{"run start t1 codex", "POST", "/admin/v1/threads/t1/runs", obj("instance", "codex"), 201, `{"runId":"run_1"}`},
		{"run start t1 codex --input=hello", "POST", "/admin/v1/threads/t1/runs", obj("instance", "codex", "input", "hello"), 201, `{"runId":"run_1"}`},
		{"run end t1", "DELETE", "/admin/v1/threads/t1/runs/current", nil, 200, `{"id":"t1","run":null}`},
		{"client create --label ci --access read-only", "POST", "/admin/v1/clients", obj("label", "ci", "access", "read-only"), 201, `{"clientId":"cl_1","token":"t"}`},
		{"client create --label ci --access read-write", "POST", "/admin/v1/clients", obj("label", "ci", "access", "read-write"), 201, `{}`},
		{"client create", "POST", "/admin/v1/clients", obj("label", "", "access", "read-only"), 201, `{}`},
		{"oauth pair", "POST", "/admin/v1/oauth/pairing-codes", obj("access", "read-only"), 201, `{"code":"ABCDE-FGHJK","access":"read-only","expiresAt":"2030-01-01T00:00:00Z"}`},
		{"oauth pair --access read-write", "POST", "/admin/v1/oauth/pairing-codes", obj("access", "read-write"), 201, `{}`},
		{"client refresh cl_1", "POST", "/admin/v1/clients/cl_1/refresh", nil, 200, `{"token":"t2"}`},
		{"client refresh cl_1 --revoke-previous", "POST", "/admin/v1/clients/cl_1/refresh", obj("revokePrevious", true), 200, `{"token":"t3"}`},
		{"client revoke cl_1", "DELETE", "/admin/v1/clients/cl_1", nil, 200, `{"clientId":"cl_1","status":"revoked"}`},
		{"client list", "GET", "/admin/v1/clients", nil, 200, `{"clients":[]}`},
		{"client list --limit 5", "GET", "/admin/v1/clients?limit=5", nil, 200, `{"clients":[],"nextCursor":"c1.x"}`},
		{"client list --cursor c1.x", "GET", "/admin/v1/clients?cursor=c1.x", nil, 200, `{"clients":[]}`},
		{"client show cl_1", "GET", "/admin/v1/clients/cl_1", nil, 200, `{"id":"cl_1","kind":"oauth","label":"oauth: x"}`},
		{"thread delete t2", "DELETE", "/admin/v1/threads/t2", nil, 204, ""}, // an empty answer prints nothing
		{"mcp-sessions", "GET", "/admin/v1/sessions", nil, 200, `{"sessions":[]}`},
		{"sessions", "GET", "/admin/v1/sessions", nil, 200, `{"sessions":[]}`}, // the old name, hidden
	} {
		t.Run(tc.args, func(t *testing.T) {
			f.respond(tc.status, tc.answer)
			code, stdout, stderr := runCLI(context.Background(), env, append([]string{"admin"}, strings.Fields(tc.args)...)...)
			if code != 0 {
				t.Fatalf("exit %d; stderr %q", code, stderr)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != tc.method || r.Path != tc.path {
				t.Errorf("request %s %s, want %s %s", r.Method, r.Path, tc.method, tc.path)
			}
			if r.Auth != "Bearer admintok" {
				t.Errorf("Authorization %q", r.Auth)
			}
			if !reflect.DeepEqual(r.Body, tc.body) {
				t.Errorf("body %#v, want %#v", r.Body, tc.body)
			}
			if (tc.body != nil) != (r.ContentType == "application/json") {
				t.Errorf("Content-Type %q with body %v", r.ContentType, tc.body)
			}
			if tc.answer == "" {
				if stdout != "" {
					t.Errorf("204 printed %q", stdout)
				}
				return
			}
			var got, want any
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("stdout %q is not JSON: %v", stdout, err)
			}
			_ = json.Unmarshal([]byte(tc.answer), &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("printed %s, want %s", stdout, tc.answer)
			}
		})
	}
}

func TestAdminCLIOutput(t *testing.T) {
	f := newFakeAdmin(t)
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "admintok"}
	admin := func(args ...string) (int, string, string) {
		return runCLI(context.Background(), env, append([]string{"admin", "--admin-url", f.URL}, args...)...)
	}

	f.respond(201, `{"providerSessionId":"ps_1","authorization":"Bearer mcprt_x","capabilities":["a"]}`+"\n")
	code, stdout, _ := admin("provider-session", "open", "t1", "codex")
	if want := "{\n  \"providerSessionId\": \"ps_1\",\n  \"authorization\": \"Bearer mcprt_x\",\n  \"capabilities\": [\n    \"a\"\n  ]\n}\n"; code != 0 || stdout != want {
		t.Errorf("indented answer: exit %d %q, want %q", code, stdout, want)
	}
	code, stdout, _ = admin("-f", "authorization", "provider-session", "open", "t1", "codex")
	if code != 0 || stdout != "Bearer mcprt_x\n" {
		t.Errorf("--field of a string: exit %d %q", code, stdout)
	}
	code, stdout, _ = admin("provider-session", "open", "--field", "capabilities", "t1", "codex")
	if code != 0 || stdout != "[\n  \"a\"\n]\n" {
		t.Errorf("--field of an array: exit %d %q", code, stdout)
	}
	code, _, stderr := admin("--field", "nope", "provider-session", "open", "t1", "codex")
	if code != 1 || !strings.Contains(stderr, `no field "nope"`) {
		t.Errorf("--field missing: exit %d %q", code, stderr)
	}
	code, stdout, stderr = admin("-v", "thread", "get", "t1")
	if code != 0 || !strings.Contains(stderr, "GET /admin/v1/threads/t1 → 201 Created") || stdout == "" {
		t.Errorf("--verbose: exit %d stdout %q stderr %q", code, stdout, stderr)
	}

	// Errors: the API's code and message on stderr, exit 1, nothing on stdout.
	for _, tc := range []struct {
		status int
		answer string
		want   string
	}{
		{404, `{"error":"unknown_thread","message":"thread \"t9\" not found"}`, `runtime: admin API: 404 Not Found: unknown_thread: thread "t9" not found`},
		{401, `{"error":"unauthorized","message":"missing or invalid admin token"}`, "401 Unauthorized: unauthorized"},
		{409, `{"error":"thread_exists"}`, "409 Conflict: thread_exists"},
		{501, "not implemented\n", "501 Not Implemented: not implemented"},
	} {
		f.respond(tc.status, tc.answer)
		code, stdout, stderr := admin("thread", "get", "t9")
		if code != 1 || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%d: exit %d stdout %q stderr %q, want %q", tc.status, code, stdout, stderr, tc.want)
		}
	}

	// No server there.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	code, _, stderr = runCLI(context.Background(), env, "admin", "--admin-url", dead.URL, "mcp-sessions")
	if code != 1 || !strings.Contains(stderr, "admin API at "+dead.URL) {
		t.Errorf("no server: exit %d %q", code, stderr)
	}
}

func TestAdminCLIToken(t *testing.T) {
	f := newFakeAdmin(t)
	f.respond(200, `{}`)
	dir := t.TempDir()
	file := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(file, []byte("filetok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // Authorization sent, "" for none (an error)
	}{
		{"env beats the file", map[string]string{"RUNTIME_ADMIN_TOKEN": "envtok"}, []string{"--admin-token-file", file}, "Bearer envtok"},
		{"file from the flag", nil, []string{"--admin-token-file", file}, "Bearer filetok"},
		{"file from env", map[string]string{"RUNTIME_ADMIN_TOKEN_FILE": file}, nil, "Bearer filetok"},
		{"file by default under HOME", map[string]string{"HOME": "/nonexistent-home"}, nil, ""},
		{"file by default under XDG_RUNTIME_DIR", map[string]string{"XDG_RUNTIME_DIR": filepath.Join(dir, "..", filepath.Base(dir), "xdg")}, nil, "Bearer xdgtok"},
		{"no file", nil, []string{"--admin-token-file", filepath.Join(dir, "missing")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if xdg := tc.env["XDG_RUNTIME_DIR"]; xdg != "" {
				if err := writeSecretFile(filepath.Join(xdg, "mcpruntime", "admin-token"), "xdgtok"); err != nil {
					t.Fatal(err)
				}
			}
			f.respond(200, `{}`)
			code, _, stderr := runCLI(context.Background(), tc.env, append(append([]string{"admin", "--admin-url", f.URL}, tc.args...), "mcp-sessions")...)
			reqs := f.requests()
			if tc.want == "" {
				if code != 1 || len(reqs) != 0 || !strings.Contains(stderr, "no admin token") {
					t.Errorf("exit %d, %d requests, stderr %q", code, len(reqs), stderr)
				}
				return
			}
			if code != 0 || len(reqs) != 1 || reqs[0].Auth != tc.want {
				t.Errorf("exit %d stderr %q requests %+v, want Authorization %q", code, stderr, reqs, tc.want)
			}
		})
	}
}

// TestAdminCLIThreadListFollowsCursor: `thread list` follows nextCursor
// and prints every thread as one answer; with --limit it prints one page
// as the API answered it.
func TestAdminCLIThreadListFollowsCursor(t *testing.T) {
	var (
		mu   sync.Mutex // guards seen
		seen []string
	)
	queries := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := seen
		seen = nil
		return out
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("cursor") {
		case "":
			io.WriteString(w, `{"threads":[{"id":"a"},{"id":"b"}],"nextCursor":"c1.b"}`)
		case "c1.b":
			io.WriteString(w, `{"threads":[{"id":"c"}],"nextCursor":"c1.c"}`)
		default:
			io.WriteString(w, `{"threads":[]}`)
		}
	}))
	defer srv.Close()
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "admintok", "RUNTIME_ADMIN_URL": srv.URL}
	code, stdout, stderr := runCLI(context.Background(), env, "admin", "thread", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct{ Threads []struct{ ID string } }
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || len(got.Threads) != 3 || got.Threads[2].ID != "c" {
		t.Errorf("printed %s (%v), want threads a, b, c", stdout, err)
	}
	if got, want := queries(), []string{"", "cursor=c1.b", "cursor=c1.c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("queries %q, want %q", got, want)
	}
	code, stdout, _ = runCLI(context.Background(), env, "admin", "thread", "list", "--limit", "2")
	if q := queries(); code != 0 || !strings.Contains(stdout, `"nextCursor": "c1.b"`) || !reflect.DeepEqual(q, []string{"limit=2"}) {
		t.Errorf("--limit 2: exit %d, printed %s, queries %q", code, stdout, q)
	}
}

// TestAdminCLIEvents: `admin events` asks for the stream with its filters
// (without --follow or --until: what the journal holds, follow=false),
// prints each record a line (or one field of it), keeps only --turn's, stops
// after --until's kind, fails when the stream ends before it, and fails
// naming where to resume when the server dropped the stream.
func TestAdminCLIEvents(t *testing.T) {
	f := newFakeAdmin(t)
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "admintok", "RUNTIME_ADMIN_URL": f.URL}
	stream := ": keep-alive\n\n" +
		"id: 1\nevent: agent.turn_started\ndata: {\"id\":1,\"kind\":\"agent.turn_started\",\"turn\":\"r1\"}\n\n" +
		"id: 2\nevent: agent.message\ndata: {\"id\":2,\"kind\":\"agent.message\",\"turn\":\"r2\",\"text\":\"other\"}\n\n" +
		"event: gap\ndata: {\"from\":3,\"to\":4}\n\n" +
		"id: 5\nevent: turn.ended\ndata: {\"id\":5,\"kind\":\"turn.ended\",\"turn\":\"r1\",\"state\":\"completed\"}\n\n" +
		"id: 6\nevent: session.closed\ndata: {\"id\":6,\"kind\":\"session.closed\"}\n\n"
	for _, tc := range []struct {
		name, args, path, want, wantErr string
	}{
		{"everything the journal holds", "events", "/admin/v1/events?after=0&follow=false",
			`{"id":1,"kind":"agent.turn_started","turn":"r1"}` + "\n" + `{"id":2,"kind":"agent.message","turn":"r2","text":"other"}` + "\n" +
				`{"kind":"gap","missed":{"from":3,"to":4}}` + "\n" + `{"id":5,"kind":"turn.ended","turn":"r1","state":"completed"}` + "\n" + `{"id":6,"kind":"session.closed"}` + "\n", ""},
		{"a turn until its end", "events --thread t1 --after 0 --turn r1 --until turn.ended", "/admin/v1/events?after=0&thread=t1",
			`{"id":1,"kind":"agent.turn_started","turn":"r1"}` + "\n" + `{"id":5,"kind":"turn.ended","turn":"r1","state":"completed"}` + "\n", ""},
		{"one field", "-f kind events --instance codex --until turn.ended", "/admin/v1/events?instance=codex",
			"agent.turn_started\nagent.message\ngap\nturn.ended\n", ""},
		{"following, of some kinds", "events --follow --kind agent,session.closed -f kind", "/admin/v1/events?kind=agent%2Csession.closed",
			"agent.turn_started\nagent.message\ngap\nturn.ended\nsession.closed\n", ""},
		{"the stream ends first", "events --turn r2 --until turn.ended", "/admin/v1/events",
			`{"id":2,"kind":"agent.message","turn":"r2","text":"other"}` + "\n", "the event stream ended before a turn.ended record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.respond(200, stream)
			code, stdout, stderr := runCLI(context.Background(), env, append([]string{"admin"}, strings.Fields(tc.args)...)...)
			if tc.wantErr == "" && code != 0 || tc.wantErr != "" && (code != 1 || !strings.Contains(stderr, tc.wantErr)) {
				t.Errorf("exit %d, stderr %q; want error %q", code, stderr, tc.wantErr)
			}
			if stdout != tc.want {
				t.Errorf("printed\n%s\nwant\n%s", stdout, tc.want)
			}
			if reqs := f.requests(); len(reqs) != 1 || reqs[0].Method != "GET" || reqs[0].Path != tc.path || reqs[0].Auth != "Bearer admintok" {
				t.Errorf("requests %+v, want one GET %s", reqs, tc.path)
			}
		})
	}
	f.respond(200, "id: 7\nevent: thread.created\ndata: {\"id\":7,\"kind\":\"thread.created\"}\n\nevent: dropped\ndata: {\"from\":8,\"to\":40}\n\n")
	code, stdout, stderr := runCLI(context.Background(), env, "admin", "events", "-F")
	if want := `{"id":7,"kind":"thread.created"}` + "\n" + `{"kind":"dropped","missed":{"from":8,"to":40}}` + "\n"; code != 1 || stdout != want ||
		!strings.Contains(stderr, "fell behind the journal (resume with --after 7)") {
		t.Errorf("a dropped stream: exit %d, printed %q, stderr %q; want the drop printed and a failure naming --after 7", code, stdout, stderr)
	}
	f.requests()
	f.respond(503, `{"error":"unavailable","message":"too many event streams open; retry later"}`)
	if code, _, stderr := runCLI(context.Background(), env, "admin", "events"); code != 1 || !strings.Contains(stderr, "503 Service Unavailable: unavailable: too many") {
		t.Errorf("a refused stream: exit %d %q", code, stderr)
	}
}
