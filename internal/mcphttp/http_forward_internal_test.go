package mcphttp_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/mcpruntime/internal/mcphttp"
	ht "github.com/agenthost/mcpruntime/internal/mcphttp/mcphttptest"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestHTTPForwardToAnInternalPath: the home node's node-to-node listener
// serves ServeForwarded on a path of its own, behind a header check, as
// the runtime's InternalHandler does (/internal/mcp, the cluster secret).
// B sets Options.ForwardHeader on every forwarded request, replacing what
// a client sent under that name, and A serves the request on its
// endpoint's path: a 2026-07-28 call and a session's initialize through B
// are A's, and the listener refused nothing.
func TestHTTPForwardToAnInternalPath(t *testing.T) {
	const header, secret = "X-Node-Auth", "node-secret-0123456789"
	fa, fb := newFake(t), newFake(t)
	a := newMCPEnv(t, fa, mcphttp.Options{})
	var refused, served atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/internal/mcp" || r.Header.Get(header) != secret {
			refused.Add(1)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		served.Add(1)
		a.srv.ServeForwarded(w, r)
	}))
	t.Cleanup(internal.Close)
	t.Cleanup(a.srv.Close) // first: A's sessions end, so B's handlers return
	home, err := url.Parse(internal.URL + "/internal/mcp")
	if err != nil {
		t.Fatal(err)
	}
	b := newMCPEnv(t, fb, mcphttp.Options{
		Route:         func(principal.Principal) (*url.URL, error) { return home, nil },
		ForwardHeader: http.Header{header: {secret}},
	})
	tok, id := fa.provider("T", "A", 0)
	c, err := fa.store.Read().Credential(id)
	if err != nil {
		t.Fatal(err)
	}
	fb.write(func(w *memdb.Writer) error { return w.PutCredential(c.Clone()) })

	h := modernHeaders(tok, "tools/call", "whoami")
	h.Set(header, "forged by the client")
	res := b.Do(http.MethodPost, h, modernBody("3", "tools/call", `"name":"whoami","arguments":{}`))
	ht.WantStatus(t, "2026-07-28 tools/call through B", res, http.StatusOK)
	if body := string(res.Body); !strings.Contains(body, `"id":3`) || !strings.Contains(body, "provider cred:") {
		t.Fatalf("2026-07-28 tools/call through B = %s, want whoami's result", body)
	}
	b.Initialize(tok)
	if got := a.srv.Sessions(); got != 1 {
		t.Fatalf("A's sessions after an initialize through B: %d, want 1", got)
	}
	if r, s := refused.Load(), served.Load(); r != 0 || s != 3 {
		t.Fatalf("A's internal listener refused %d and served %d requests, want 0 and 3 (the call, initialize, initialized)", r, s)
	}
}
