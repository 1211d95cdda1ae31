package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

func subscribeBody(id, method, uri string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":{"uri":%q}}`, id, method, uri)
}

// notifications returns "method uri" (uri only for resources/updated) of
// every notification the stream carried so far.
func notifications(t *testing.T, s *ht.Stream) []string {
	t.Helper()
	var out []string
	for _, ev := range s.Events() {
		if ev.Data == "" {
			continue
		}
		var a ht.Answer
		noErr(t, json.Unmarshal([]byte(ev.Data), &a))
		if a.Method == "" {
			continue
		}
		n := a.Method
		if a.Method == "notifications/resources/updated" {
			var p struct{ URI string }
			noErr(t, json.Unmarshal(a.Params, &p))
			n += " " + p.URI
		}
		out = append(out, n)
	}
	return out
}

// waitNotifications waits until the stream carried exactly want.
func waitNotifications(t *testing.T, what string, s *ht.Stream, want ...string) {
	t.Helper()
	ht.WaitUntil(t, fmt.Sprintf("%s: notifications %q (have %q)", what, want, notifications(t, s)), func() bool {
		return slices.Equal(notifications(t, s), want)
	})
}

const toolsChanged = "notifications/tools/list_changed"

// TestHTTPSubscribeUpdated: a subscribed URI's updates reach the
// session's standalone stream, one notification each; after unsubscribe
// none does. list_changed is the barrier that proves an update was not
// sent: notifications of one session go out in order.
func TestHTTPSubscribeUpdated(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	f.resource("test://watched", "w")
	f.resource("test://other", "o")
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)
	if a := e.Post(tok, sid, subscribeBody("s1", "resources/subscribe", "test://watched")).RPC(t); a.Error != nil || string(a.Result) != "{}" {
		t.Fatalf("resources/subscribe = %+v, want {}", a)
	}
	e.srv.ResourceUpdated("test://watched")
	e.srv.ResourceUpdated("test://other") // not subscribed
	e.srv.ListChanged("tools")
	waitNotifications(t, "subscribed", st, "notifications/resources/updated test://watched", toolsChanged)

	if a := e.Post(tok, sid, subscribeBody("u1", "resources/unsubscribe", "test://watched")).RPC(t); a.Error != nil || string(a.Result) != "{}" {
		t.Fatalf("resources/unsubscribe = %+v, want {}", a)
	}
	e.srv.ResourceUpdated("test://watched")
	e.srv.ListChanged("tools")
	waitNotifications(t, "unsubscribed", st, "notifications/resources/updated test://watched", toolsChanged, toolsChanged)
	if n := e.srv.SubscribedURIs(); n != 0 {
		t.Fatalf("the index holds %d URIs after the only subscription went, want 0", n)
	}
}

// TestHTTPSubscribeRefusedLikeUnknown: a URI the caller may not read and
// one nothing is at get the same answer (-32002, data.uri), and neither is
// recorded; unsubscribing either succeeds, as unsubscribing a subscribed
// one does.
func TestHTTPSubscribeRefusedLikeUnknown(t *testing.T) {
	f := newFake(t)
	id, tok := openMinted(t, f, "T", "A")
	otherID, otherTok := openMinted(t, f, "U", "A")
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	otherSid := e.Initialize(otherTok)
	f.resource("test://secret", "s", principal.ProviderNamespace(otherID)) // only the other namespace reads it
	refused := e.Post(tok, sid, subscribeBody("s", "resources/subscribe", "test://secret"))
	unknown := e.Post(tok, sid, subscribeBody("s", "resources/subscribe", "test://nothing"))
	got := strings.Replace(string(refused.Body), "test://secret", "URI", 1)
	want := strings.Replace(string(unknown.Body), "test://nothing", "URI", 1)
	if refused.Status != unknown.Status || got != want {
		t.Fatalf("subscribe of a refused URI = %d %s; of an unknown one = %d %s; want the same", refused.Status, got, unknown.Status, want)
	}
	if a := unknown.RPC(t); a.Error == nil || a.Error.Code != transport.CodeResourceNotFound {
		t.Fatalf("subscribe of an unknown URI = %+v, want -32002", a)
	}
	if st, _ := e.srv.State(sid, principal.ProviderNamespace(id)); st.Subscriptions != 0 {
		t.Fatalf("the session holds %d subscriptions after two refusals, want 0", st.Subscriptions)
	}
	for _, uri := range []string{"test://secret", "test://nothing"} {
		if a := e.Post(tok, sid, subscribeBody("u", "resources/unsubscribe", uri)).RPC(t); a.Error != nil {
			t.Fatalf("unsubscribe %s = %+v, want {}", uri, a)
		}
	}
	// The other namespace, which may read it, subscribes.
	if a := e.Post(otherTok, otherSid, subscribeBody("s", "resources/subscribe", "test://secret")).RPC(t); a.Error != nil {
		t.Fatalf("subscribe by a reader = %+v, want {}", a)
	}
}

// TestHTTPSubscribeCheckedAtDelivery: a session that subscribed a URI it
// could read, and may no longer, gets no update for it.
func TestHTTPSubscribeCheckedAtDelivery(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	f.resource("test://watched", "w")
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)
	ht.WantStatus(t, "subscribe", e.Post(tok, sid, subscribeBody("s", "resources/subscribe", "test://watched")), http.StatusOK)
	f.resource("test://watched", "w", "cred:nobody") // the session's principal may not read it now
	e.srv.ResourceUpdated("test://watched")
	e.srv.ListChanged("tools")
	waitNotifications(t, "no longer readable", st, toolsChanged)
}

// TestHTTPListChangedOnlyOpenStreams: a list change reaches every session
// whose standalone stream is open, and is not kept for one whose stream is
// not: opened later, it carries only what changed since.
func TestHTTPListChangedOnlyOpenStreams(t *testing.T) {
	f := newFake(t)
	id, tok := openMinted(t, f, "T", "A")
	e := newMCPEnv(t, f, transport.Options{})
	one, two := e.Initialize(tok), e.Initialize(tok)
	st1 := e.Stream(tok, one)
	e.srv.ListChanged("tools")
	e.srv.ListChanged("resources")
	e.srv.ListChanged("nonsense") // not a kind: nothing
	waitNotifications(t, "open stream", st1, toolsChanged, "notifications/resources/list_changed")
	st2 := e.Stream(tok, two)
	e.srv.ListChanged("prompts")
	waitNotifications(t, "stream opened after the changes", st2, "notifications/prompts/list_changed")
	waitNotifications(t, "open stream", st1, toolsChanged, "notifications/resources/list_changed", "notifications/prompts/list_changed")
	// The stream marks an event delivered once its write returned, which
	// may be after the client read it: wait for that, not for the bytes.
	ht.WaitUntil(t, "the session keeps none of the notifications it delivered", func() bool {
		st, _ := e.srv.State(two, principal.ProviderNamespace(id))
		return st.Events == 0
	})
}

// TestHTTPListChangedNotDeclared: a kind whose listChanged the server does
// not declare is never sent, nor are subscriptions served without the
// subscribe capability (-32601).
func TestHTTPListChangedNotDeclared(t *testing.T) {
	f := newFake(t)
	f.caps = &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Prompts: &mcp.PromptCapabilities{ListChanged: true}}
	_, tok := openMinted(t, f, "T", "A")
	f.resource("test://watched", "w")
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)
	for _, m := range []string{"resources/subscribe", "resources/unsubscribe"} {
		if a := e.Post(tok, sid, subscribeBody("s", m, "test://watched")).RPC(t); a.Error == nil || a.Error.Code != transport.CodeMethodNotFound {
			t.Fatalf("%s without the capability = %+v, want -32601", m, a)
		}
	}
	e.srv.ListChanged("tools")
	e.srv.ListChanged("resources")
	e.srv.ListChanged("prompts")
	waitNotifications(t, "only prompts declared", st, "notifications/prompts/list_changed")
}

// TestHTTPSubscriptionsBounded: a session holds at most MaxSubscriptions
// URIs (a URI again counts once); the next is refused; a session's end
// takes its subscriptions out of the index.
func TestHTTPSubscriptionsBounded(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	for i := range 4 {
		f.resource(fmt.Sprintf("test://r%d", i), "r")
	}
	e := newMCPEnv(t, f, transport.Options{MaxSubscriptions: 3})
	sid := e.Initialize(tok)
	for i := range 3 {
		for range 2 {
			if a := e.Post(tok, sid, subscribeBody("s", "resources/subscribe", fmt.Sprintf("test://r%d", i))).RPC(t); a.Error != nil {
				t.Fatalf("subscription %d = %+v, want {}", i, a)
			}
		}
	}
	if a := e.Post(tok, sid, subscribeBody("s", "resources/subscribe", "test://r3")).RPC(t); a.Error == nil || a.Error.Code != transport.CodeInvalidRequest {
		t.Fatalf("subscription past the bound = %+v, want -32600", a)
	}
	long := "test://" + strings.Repeat("x", 5000)
	if a := e.Post(tok, sid, subscribeBody("s", "resources/subscribe", long)).RPC(t); a.Error == nil || a.Error.Code != transport.CodeInvalidParams {
		t.Fatalf("subscription of an overlong URI = %+v, want -32602", a)
	}
	if a := e.Post(tok, sid, `{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{}}`).RPC(t); a.Error == nil || a.Error.Code != transport.CodeInvalidParams {
		t.Fatalf("subscription without a uri = %+v, want -32602", a)
	}
	if n := e.srv.SubscribedURIs(); n != 3 {
		t.Fatalf("the index holds %d URIs, want 3", n)
	}
	ht.WantStatus(t, "DELETE", e.Del(tok, sid), http.StatusNoContent)
	ht.WaitUntil(t, "the ended session's subscriptions leave the index", func() bool { return e.srv.SubscribedURIs() == 0 })
}

// TestHTTPSubscriptionStorm (attack): many sessions subscribe and
// unsubscribe while updates and list changes come from many goroutines,
// and the sessions end: nothing races, every open stream stays within its
// buffer, and the index is empty once the sessions are gone.
func TestHTTPSubscriptionStorm(t *testing.T) {
	f := newFake(t)
	id, tok := openMinted(t, f, "T", "A")
	const uris = 8
	for i := range uris {
		f.resource(fmt.Sprintf("test://r%d", i), "r")
	}
	e := newMCPEnv(t, f, transport.Options{ReplayEvents: 16, MaxSessionsPerNamespace: 64})
	ns := principal.ProviderNamespace(id)
	sids := make([]string, 12)
	for i := range sids {
		sids[i] = e.Initialize(tok)
		if i%2 == 0 {
			e.Stream(tok, sids[i])
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				e.srv.ResourceUpdated(fmt.Sprintf("test://r%d", (n+g)%uris))
				if n%5 == 0 {
					e.srv.ListChanged("tools")
				}
			}
		}()
	}
	var subs sync.WaitGroup
	for i, sid := range sids {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for n := range 40 {
				m := "resources/subscribe"
				if n%3 == 2 {
					m = "resources/unsubscribe"
				}
				res := e.Post(tok, sid, subscribeBody("s", m, fmt.Sprintf("test://r%d", (n+i)%uris)))
				if res.Status != http.StatusOK {
					t.Errorf("%s on %s = %d", m, sid, res.Status)
					return
				}
			}
		}()
	}
	subs.Wait()
	for _, sid := range sids {
		st, ok := e.srv.State(sid, ns)
		if !ok || st.Events > 16 {
			t.Fatalf("session %s keeps %+v (ok %v), want at most 16 events", sid, st, ok)
		}
	}
	for _, sid := range sids {
		ht.WantStatus(t, "DELETE", e.Del(tok, sid), http.StatusNoContent)
	}
	close(stop)
	wg.Wait()
	ht.WaitUntil(t, "the index empties with the sessions", func() bool { return e.srv.SubscribedURIs() == 0 })
}

// TestHTTPClientCapabilitiesReachServe: what the client declared at
// initialize reaches every Backend.Serve of the session — roots as the
// go-sdk's RootsV2, which its own decoding leaves nil — and a client that
// declared nothing is an empty, non-nil value.
func TestHTTPClientCapabilitiesReachServe(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	seen := make(chan *mcp.ClientCapabilities, 2)
	f.serveTool("caps", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		seen <- req.ClientCapabilities
		return transport.Response{Result: textResult("ok")}
	})
	e := newMCPEnv(t, f, transport.Options{})
	for _, test := range []struct {
		caps       string
		roots      bool
		sampling   bool
		rootsEvent bool
	}{
		{`{"roots":{"listChanged":true},"sampling":{}}`, true, true, true},
		{`{}`, false, false, false},
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":` + test.caps + `,"clientInfo":{"name":"t","version":"1"}}}`
		res := e.Post(tok, "", body)
		sid := res.Header.Get("Mcp-Session-Id")
		ht.WantStatus(t, "initialize", res, http.StatusOK)
		ht.WantStatus(t, "tools/call caps", e.Post(tok, sid, ht.CallBody(`2`, "caps", "")), http.StatusOK)
		c := <-seen
		if c == nil || (c.RootsV2 != nil) != test.roots || (c.Sampling != nil) != test.sampling || (c.RootsV2 != nil && c.RootsV2.ListChanged != test.rootsEvent) {
			t.Fatalf("capabilities %s reached Serve as %+v (roots %+v)", test.caps, c, c.RootsV2)
		}
	}
}
