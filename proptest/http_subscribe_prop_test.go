package proptest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The HTTP machine's subscriptions (SPEC §5b.13–14): resources/subscribe
// and unsubscribe over HTTP by any token on any session, and deliveries of
// notifications/resources/updated to a session's standalone stream. The
// promises: a subscribe is accepted exactly when the caller may read the
// URI (a refused URI answers as an unknown one), foreign and unknown
// sessions are the same 404 (exchange's invariant 3), and an update
// reaches a session's stream exactly when the session subscribed the URI
// and the stream's principal may read it at delivery.

func subscribeBody(id int, method, uri string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"uri":%q}}`, id, method, uri)
}

// subscription sends resources/subscribe (on) or unsubscribe and checks
// the answer against the model, which it updates.
func (h *httpMachine) subscription(t *rapid.T, on bool) {
	h.ensureResources(t)
	who := h.genCaller(t)
	sid := h.genSession(t, who)
	if rapid.IntRange(0, 9).Draw(t, "noSession") == 0 {
		sid = ""
	}
	if owned := h.ownedSessions(); len(owned) > 0 && rapid.Bool().Draw(t, "owned") {
		o := pick(t, "ownedSession", owned)
		who, sid = caller{token: o.c.token}, o.s.id
	}
	uri := rapid.SampledFrom(resourceURIs()).Draw(t, "uri")
	if c := h.m.credOf(who.token); c != nil && !who.missing && rapid.Bool().Draw(t, "readable") {
		var readable []string
		for _, u := range resourceURIs() {
			if h.mayRead(c, u) {
				readable = append(readable, u)
			}
		}
		if len(readable) > 0 {
			uri = rapid.SampledFrom(readable).Draw(t, "uri")
		}
	}
	method := "resources/unsubscribe"
	if on {
		method = "resources/subscribe"
	}
	call := fmt.Sprintf("%s %s (%v, session %q)", method, uri, who, sid)
	want, c := admit(h.m, h.mcp, who, sid)
	switch {
	case want != 0:
	case sid == "":
		want = http.StatusBadRequest
	default:
		want = http.StatusOK
	}
	r := h.exchange(t, call, http.MethodPost, who, sid, func() []byte { return subscribeBody(h.nextID(), method, uri) }, want)
	if r.status != http.StatusOK {
		return
	}
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
			Data struct {
				URI string `json:"uri"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatalf("%s: body %s: %v", call, r.body, err)
	}
	s := h.mcp.byID[sid]
	switch {
	case !on:
		if resp.Error != nil || string(resp.Result) != "{}" {
			t.Fatalf("%s = %s, want {}", call, r.body)
		}
		delete(s.subs, uri)
	case h.mayRead(c, uri):
		if resp.Error != nil || string(resp.Result) != "{}" {
			t.Fatalf("%s = %s, want {} (the caller may read it)", call, r.body)
		}
		if s.subs == nil {
			s.subs = map[string]bool{}
		}
		s.subs[uri] = true
	default:
		if resp.Error == nil || resp.Error.Code != -32002 || resp.Error.Data.URI != uri {
			t.Fatalf("%s = %s, want -32002 with data.uri, as for an unknown URI", call, r.body)
		}
	}
}

// owned is a live session and a live token of its owner.
type owned struct {
	s *mcpSess
	c *modelCred
}

// ownedSessions returns every live session with each live token of its
// owner.
func (h *httpMachine) ownedSessions() []owned {
	var out []owned
	for _, s := range h.mcp.sessions {
		if s.deleted || h.m.namespaceState(s.owner) != nsLive {
			continue
		}
		for _, c := range h.m.creds {
			if h.m.live(c) && h.m.principal(c).Namespace == s.owner {
				out = append(out, owned{s, c})
			}
		}
	}
	return out
}

// HTTPSubscribe is resources/subscribe.
func (h *httpMachine) HTTPSubscribe(t *rapid.T) { h.subscription(t, true) }

// HTTPUnsubscribe is resources/unsubscribe.
func (h *httpMachine) HTTPUnsubscribe(t *rapid.T) { h.subscription(t, false) }

// ResourceUpdated opens the standalone stream of a live session with a
// live token of its owner, tells the runtime a URI was updated, then
// changes the tool list as a barrier (a session's notifications go out in
// order): the update must have come before the list change exactly when
// the session subscribed the URI and the token's principal may read it.
func (h *httpMachine) ResourceUpdated(t *rapid.T) {
	h.ensureResources(t)
	targets := h.ownedSessions()
	if len(targets) == 0 {
		t.Skip("no live session")
	}
	tg := pick(t, "session", targets)
	uri := rapid.SampledFrom(resourceURIs()).Draw(t, "uri")
	if subs := slices.Sorted(maps.Keys(tg.s.subs)); len(subs) > 0 && rapid.IntRange(0, 2).Draw(t, "subscribedURI") > 0 {
		uri = rapid.SampledFrom(subs).Draw(t, "uri")
	}
	want := tg.s.subs[uri] && h.mayRead(tg.c, uri)
	call := fmt.Sprintf("ResourceUpdated(%s) to session %s (%s)", uri, tg.s.id, tg.c.describe())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tg.c.token)
	req.Header.Set("Mcp-Session-Id", tg.s.id)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s: GET: %v", call, err)
	}
	h.issued++
	defer func() {
		cancel()
		resp.Body.Close()
		h.settle(t)
	}()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: GET = %d, want 200", call, resp.StatusCode)
	}
	methods := make(chan string, 16)
	go func() {
		defer close(methods)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var n struct {
				Method string `json:"method"`
				Params struct {
					URI string `json:"uri"`
				} `json:"params"`
			}
			if json.Unmarshal([]byte(data), &n) == nil {
				methods <- n.Method + " " + n.Params.URI
			}
		}
	}()

	h.rt.ResourceUpdated(uri)
	h.tools++
	barrier := fmt.Sprintf("barrier_%d", h.tools)
	if err := h.rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: barrier}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		}}); err != nil {
		t.Fatalf("RegisterTool(%s): %v", barrier, err)
	}
	defer h.rt.RemoveTool(barrier)
	got := false
	deadline := time.After(waitTimeout)
	for {
		select {
		case m, ok := <-methods:
			switch {
			case !ok:
				t.Fatalf("%s: the stream ended before the barrier", call)
			case m == "notifications/resources/updated "+uri:
				got = true
				continue
			case m != "notifications/tools/list_changed ":
				t.Fatalf("%s: the stream carried %q", call, m)
			}
		case <-deadline:
			t.Fatalf("%s: no barrier after %v", call, waitTimeout)
		}
		break
	}
	if got != want {
		t.Fatalf("%s: delivered = %v, want %v (subscribed %v, may read %v)", call, got, want, tg.s.subs[uri], h.mayRead(tg.c, uri))
	}
}

// Resume is a GET with a Last-Event-ID no session ever issued (a stream id
// past any the machine reaches, or not an id of this endpoint), by any
// token on any session: admitted, it is the unknown session's 404, byte for
// byte (exchange's twin check), so that a Last-Event-ID tells nothing of
// another session's streams (SPEC §5b.16).
func (h *httpMachine) Resume(t *rapid.T) {
	who := h.genCaller(t)
	sid := h.genSession(t, who)
	if rapid.IntRange(0, 9).Draw(t, "noSession") == 0 {
		sid = ""
	}
	id := rapid.SampledFrom([]string{"4294967295.0", "4294967295.7", "mcps_x-1", "1.2.3", ""}).Draw(t, "lastEventID")
	call := fmt.Sprintf("GET Last-Event-ID %q (%v, session %q)", id, who, sid)
	want, _ := admit(h.m, h.mcp, who, sid)
	switch {
	case want != 0:
	case sid == "":
		want = http.StatusBadRequest
	default:
		want = http.StatusNotFound
	}
	h.header = http.Header{"Last-Event-Id": {id}}
	defer func() { h.header = nil }()
	h.exchange(t, call, http.MethodGet, who, sid, func() []byte { return nil }, want)
}
