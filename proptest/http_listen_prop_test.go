package proptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The HTTP machine's listen streams (SPEC §5a.7, §6.9): 2026-07-28
// subscriptions/listen opened by any token, with any filter, kept open
// across the machine's actions. The model predicts the answer — 401 for a
// token that is not live, 429 once the namespace has listenPerNamespace
// streams open, else 200 and the acknowledgement, byte for byte, with the
// subset of the filter honoured — and, after every step, each open stream's
// fate: open while its credential is live; ended within listenCloseBound,
// with no result, once the credential is revoked or removed (revocation,
// rotate, release, archive, delete, a client grant's revocation or a
// refresh that revoked the token); either while it is only expired (the
// runtime learns of a fake-clock expiry on the credential's next store
// change). Every frame a stream carries after its acknowledgement is a
// notification it opted into, tagged with its own subscription id.
// ListenNotify opens a fresh stream, changes a list, updates a resource or
// posts, then sends a barrier the stream opted into, and checks that what
// came in between is exactly what the model says. A listen request's id is
// sometimes one another stream — of another namespace too — was opened
// with: the subscription id is the request's own (SPEC §5a.7), so that
// answers exactly as a fresh id does and changes nothing for the other.

const (
	modernProto = "2026-07-28"
	metaSubID   = "io.modelcontextprotocol/subscriptionId"
	// listenPerNamespace is the HTTP machine's
	// MCPOptions.MaxListenStreamsPerNamespace: small, so that the model's
	// 429 also finds a stream the endpoint failed to forget.
	listenPerNamespace = 2
	// listenCloseBound is SPEC §3.3's bound on a stream of a revoked
	// credential: the deadline of the wait for its end, from the Check
	// that follows the revoking action (a hang detector: the pass path
	// waits on the stream ending, never on the clock).
	listenCloseBound = time.Second
)

// listenFilter is params.notifications: what a listen asks for, or what
// the model says the acknowledgement honours.
type listenFilter struct {
	tools, prompts, resources bool
	subs                      []string // resourceSubscriptions
}

// wire is the filter as a request's params.notifications.
func (f listenFilter) wire() map[string]any {
	out := map[string]any{}
	if f.tools {
		out["toolsListChanged"] = true
	}
	if f.prompts {
		out["promptsListChanged"] = true
	}
	if f.resources {
		out["resourcesListChanged"] = true
	}
	if len(f.subs) > 0 {
		out["resourceSubscriptions"] = f.subs
	}
	return out
}

// honour is the subset of asked the acknowledgement names for c in m:
// every list kind (the runtime declares listChanged for all three), and
// the URIs c may read now, each once, in the order asked.
func honour(m *model, c *modelCred, asked listenFilter) listenFilter {
	out := listenFilter{tools: asked.tools, prompts: asked.prompts, resources: asked.resources}
	for _, u := range asked.subs {
		if m.mayRead(c, u) && !slices.Contains(out.subs, u) {
			out.subs = append(out.subs, u)
		}
	}
	return out
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ackFrame is the exact data of a listen's first event.
func ackFrame(id string, f listenFilter) string {
	var n []string
	if f.tools {
		n = append(n, `"toolsListChanged":true`)
	}
	if f.prompts {
		n = append(n, `"promptsListChanged":true`)
	}
	if f.resources {
		n = append(n, `"resourcesListChanged":true`)
	}
	if len(f.subs) > 0 {
		uris := make([]string, len(f.subs))
		for i, u := range f.subs {
			uris[i] = jsonString(u)
		}
		n = append(n, `"resourceSubscriptions":[`+strings.Join(uris, ",")+`]`)
	}
	return `{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"` + metaSubID + `":` + id + `},"notifications":{` + strings.Join(n, ",") + `}}}`
}

// listChangedFrame is the exact data of a list change of kind on the
// stream of subscription id.
func listChangedFrame(id, kind string) string {
	return `{"jsonrpc":"2.0","method":"notifications/` + kind + `/list_changed","params":{"_meta":{"` + metaSubID + `":` + id + `}}}`
}

// updatedFrame is the exact data of an update of uri on the stream of
// subscription id.
func updatedFrame(id, uri string) string {
	return `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"_meta":{"` + metaSubID + `":` + id + `},"uri":` + jsonString(uri) + `}}`
}

// allowed is every frame but the acknowledgement a stream with filter f
// may carry.
func (f listenFilter) allowed(id string) map[string]bool {
	out := map[string]bool{}
	for kind, on := range map[string]bool{"tools": f.tools, "prompts": f.prompts, "resources": f.resources} {
		if on {
			out[listChangedFrame(id, kind)] = true
		}
	}
	for _, u := range f.subs {
		out[updatedFrame(id, u)] = true
	}
	return out
}

// listenStream is one listen request the machine made and, once it
// answered 200, its event stream. It names its credential by token, never
// by a pointer into the model: a concurrent batch replaces the model.
type listenStream struct {
	token  string
	ns     string
	id     string // the request's id, raw JSON: the subscription id
	filter listenFilter
	cancel context.CancelFunc

	status int
	header http.Header
	body   []byte // a refusal's body

	mu     sync.Mutex // guards frames
	frames []string   // the data of each event
	more   chan struct{}
	done   chan struct{} // closed once the response ended
}

// openListen POSTs subscriptions/listen with tok (who) and waits for the
// answer's status. A refusal is read whole; a stream is read by a
// goroutine until it ends. Either way h.listensDone counts the request
// once its answer ended, when the endpoint has counted it. Safe for
// concurrent use (a batch's listens).
func (h *httpMachine) openListen(who caller, sid, id string, asked listenFilter) (*listenStream, error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": "subscriptions/listen", "params": map[string]any{
		"notifications": asked.wire(),
		"_meta":         modernMeta(nil),
	}})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, err
	}
	if !who.missing {
		req.Header.Set("Authorization", "Bearer "+who.token)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Protocol-Version", modernProto)
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	s := &listenStream{token: who.token, id: id, cancel: cancel, more: make(chan struct{}, 1), done: make(chan struct{})}
	h.listenMu.Lock()
	h.opened = append(h.opened, s)
	h.listenMu.Unlock()
	resp, err := h.client.Do(req)
	if err != nil {
		cancel()
		close(s.done)
		return nil, err
	}
	s.status, s.header = resp.StatusCode, resp.Header.Clone()
	if resp.StatusCode != http.StatusOK {
		s.body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		close(s.done)
		h.listensDone.Add(1)
		return s, err
	}
	go func() {
		defer close(s.done)
		defer h.listensDone.Add(1) // after the body ended: the endpoint counted the request
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue // event: lines, keep-alive comments, blank lines
			}
			s.mu.Lock()
			s.frames = append(s.frames, d)
			s.mu.Unlock()
			select {
			case s.more <- struct{}{}:
			default:
			}
		}
	}()
	return s, nil
}

// snapshot returns the frames so far.
func (s *listenStream) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.frames)
}

func (s *listenStream) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitFrames waits until the stream carried n frames, or ended, or the
// deadline passed; it returns the frames so far.
func (s *listenStream) waitFrames(n int, deadline time.Time) []string {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		if f := s.snapshot(); len(f) >= n {
			return f
		}
		select {
		case <-s.more:
		case <-s.done:
			return s.snapshot()
		case <-timer.C:
			return s.snapshot()
		}
	}
}

// waitEnd waits until the stream ended or the deadline passed.
func (s *listenStream) waitEnd(deadline time.Time) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-s.done:
		return true
	case <-timer.C:
		return false
	}
}

// modernMeta is a 2026-07-28 request's params._meta with the client
// capabilities caps (nil: none).
func modernMeta(caps map[string]any) map[string]any {
	if caps == nil {
		caps = map[string]any{}
	}
	return map[string]any{"io.modelcontextprotocol/protocolVersion": modernProto, "io.modelcontextprotocol/clientCapabilities": caps}
}

// ---- generators ----

// genListenID draws a listen request's id: mostly a fresh string, else a
// fresh number, else the id of a stream the machine holds open (its own
// namespace's or another's).
func (h *httpMachine) genListenID(t *rapid.T) string {
	switch n := rapid.IntRange(0, 5).Draw(t, "listenIDKind"); {
	case n == 0:
		return fmt.Sprint(h.nextID())
	case n == 1 && len(h.listens) > 0:
		return pick(t, "borrowedListenID", h.listens).id
	}
	return jsonString(fmt.Sprintf("L%d", h.nextID()))
}

// genFilter draws a filter: any list kinds, any of the machine's URIs,
// sometimes one twice.
func genFilter(t *rapid.T) listenFilter {
	f := listenFilter{
		tools:     rapid.Bool().Draw(t, "toolsListChanged"),
		prompts:   rapid.IntRange(0, 3).Draw(t, "promptsListChanged") == 0,
		resources: rapid.IntRange(0, 3).Draw(t, "resourcesListChanged") == 0,
	}
	for _, u := range resourceURIs() {
		if rapid.IntRange(0, 2).Draw(t, "subscribe") == 0 {
			f.subs = append(f.subs, u)
		}
	}
	if len(f.subs) > 0 && rapid.IntRange(0, 4).Draw(t, "twice") == 0 {
		f.subs = append(f.subs, f.subs[0])
	}
	return f
}

// openListens counts the streams the machine holds open in namespace ns.
func (h *httpMachine) openListens(ns string) int {
	n := 0
	for _, l := range h.listens {
		if l.ns == ns {
			n++
		}
	}
	return n
}

// ---- actions ----

// Listen opens a listen stream for any token, with any filter and any
// stale session id, and keeps it open: the model predicts 401, 429 or the
// acknowledgement.
func (h *httpMachine) Listen(t *rapid.T) {
	h.ensureResources(t)
	h.watchListens(t)
	who := h.genCaller(t)
	sid := ""
	if rapid.IntRange(0, 3).Draw(t, "staleSession") == 0 {
		sid = h.genSession(t, who)
	}
	id := h.genListenID(t)
	asked := genFilter(t)
	call := fmt.Sprintf("subscriptions/listen id %s %+v (%v, stale session %q)", id, asked, who, sid)
	want, c := admit(h.m, h.mcp, who, "")
	var ns string
	if want == 0 {
		ns = h.m.principal(c).Namespace
		want = http.StatusOK
		if h.openListens(ns) >= listenPerNamespace {
			want = http.StatusTooManyRequests
		}
	}
	var before any
	if sid != "" {
		before = h.record(sid)
	}
	s, err := h.openListen(who, sid, id, asked)
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if s.status != want {
		s.cancel()
		t.Fatalf("%s = %d %s, want %d", call, s.status, s.body, want)
	}
	if s.header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("%s echoed a session id", call)
	}
	if sid != "" && fmt.Sprint(before) != fmt.Sprint(h.record(sid)) {
		t.Fatalf("%s changed session %s's record", call, sid)
	}
	switch want {
	case http.StatusTooManyRequests:
		var resp struct {
			ID    json.RawMessage `json:"id"`
			Error *struct{ Code int }
		}
		if json.Unmarshal(s.body, &resp) != nil || resp.Error == nil || string(resp.ID) != id || s.header.Get("Retry-After") == "" {
			t.Fatalf("%s = 429 %v %s, want a JSON-RPC error with id %s and Retry-After", call, s.header, s.body, id)
		}
		h.settle(t)
		return
	case http.StatusOK:
	default:
		h.settle(t)
		return
	}
	s.ns, s.filter = ns, honour(h.m, c, asked)
	h.listens = append(h.listens, s)
	if got := s.waitFrames(1, time.Now().Add(waitTimeout)); len(got) == 0 || got[0] != ackFrame(id, s.filter) {
		t.Fatalf("%s: first events %q, want the acknowledgement %s", call, got, ackFrame(id, s.filter))
	}
}

// ListenNotify opens a fresh listen stream for a live token, then makes
// the runtime change a list, update a resource or post, then sends a
// barrier the stream opted into: what the stream carried between its
// acknowledgement and the barrier is exactly what the model says — the
// list changes it opted into, the updates of URIs it subscribed and may
// read, each tagged with its subscription id.
func (h *httpMachine) ListenNotify(t *rapid.T) {
	h.ensureResources(t)
	h.watchListens(t)
	var cands []*modelCred
	for _, c := range h.m.creds {
		if h.m.live(c) && h.openListens(h.m.principal(c).Namespace) < listenPerNamespace {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		t.Skip("no live token with room for a listen stream")
	}
	c := pick(t, "listener", cands)
	asked := genFilter(t)
	kind := rapid.SampledFrom([]string{"tools", "prompts", "resources", "update", "post", "gone"}).Draw(t, "change")
	f := honour(h.m, c, asked)
	// gone: a thread whose transcript the stream subscribed is deleted
	// (not the listener's own), then its transcript updated.
	var gone []string
	for _, id := range threadPool {
		if slices.Contains(f.subs, mcpruntime.TranscriptURI(id)) && (c.kind != kindProvider || c.thread != id) {
			gone = append(gone, id)
		}
	}
	if kind == "gone" && len(gone) == 0 {
		kind = "update"
	}
	if (!f.tools && len(f.subs) == 0) || kind == "gone" {
		asked.tools, f.tools = true, true // a barrier it opted into
	}
	id := h.genListenID(t)
	call := fmt.Sprintf("ListenNotify id %s %+v (%s)", id, asked, c.describe())
	s, err := h.openListen(caller{token: c.token}, "", id, asked)
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	defer func() {
		s.cancel()
		<-s.done
		h.settle(t)
	}()
	if s.status != http.StatusOK {
		t.Fatalf("%s = %d %s, want 200", call, s.status, s.body)
	}
	if got := s.waitFrames(1, time.Now().Add(waitTimeout)); len(got) == 0 || got[0] != ackFrame(id, f) {
		t.Fatalf("%s: first events %q, want the acknowledgement %s", call, got, ackFrame(id, f))
	}

	var want []string
	what := kind
	switch kind {
	case "tools", "prompts", "resources":
		h.changeList(t, what)
		if (what == "tools" && f.tools) || (what == "prompts" && f.prompts) || (what == "resources" && f.resources) {
			want = append(want, listChangedFrame(id, what), listChangedFrame(id, what))
		}
	case "update":
		uri := rapid.SampledFrom(resourceURIs()).Draw(t, "uri")
		if len(f.subs) > 0 && rapid.Bool().Draw(t, "subscribedURI") {
			uri = rapid.SampledFrom(f.subs).Draw(t, "uri")
		}
		what += " " + uri
		h.rt.ResourceUpdated(uri)
		if slices.Contains(f.subs, uri) && h.m.mayRead(c, uri) {
			want = append(want, updatedFrame(id, uri))
		}
	case "gone":
		id := pick(t, "deleted", gone)
		uri := mcpruntime.TranscriptURI(id)
		what = fmt.Sprintf("DeleteThread(%s), then an update of %s", id, uri)
		wantErr(t, what, h.rt.DeleteThread(h.ctx, id), h.m.deleteThread(id))
		h.rt.ResourceUpdated(uri) // no longer readable: not delivered
	case "post":
		if uri, ok := h.postSomething(t); ok {
			what += " to " + uri
			if slices.Contains(f.subs, uri) && h.m.mayRead(c, uri) {
				want = append(want, updatedFrame(id, uri))
			}
		}
	}
	// The barrier: an update of a URI it subscribed and may still read, or
	// a tool list change; of another kind than the change where the filter
	// allows, so that a change that should have come and did not shows as
	// the barrier in its place.
	readable := slices.DeleteFunc(slices.Clone(f.subs), func(u string) bool { return !h.m.mayRead(c, u) })
	useUpdate := len(readable) > 0
	if useUpdate && f.tools {
		switch kind {
		case "tools":
		case "update", "post", "gone":
			useUpdate = false
		default:
			useUpdate = rapid.Bool().Draw(t, "updateBarrier")
		}
	}
	var barrier string
	if useUpdate {
		barrier = rapid.SampledFrom(readable).Draw(t, "barrierURI")
		h.rt.ResourceUpdated(barrier)
		want = append(want, updatedFrame(id, barrier))
	} else {
		h.tools++
		name := fmt.Sprintf("barrier_%d", h.tools)
		h.registerNop(t, name)
		defer h.rt.RemoveTool(name)
		barrier = "tool " + name
		want = append(want, listChangedFrame(id, "tools"))
	}
	got := s.waitFrames(1+len(want), time.Now().Add(waitTimeout))
	if len(got) < 1+len(want) || !slices.Equal(got[1:1+len(want)], want) {
		t.Fatalf("%s, then %s, then the barrier %s: the stream carried %q, want %q after the acknowledgement", call, what, barrier, got, want)
	}
}

// changeList registers something of kind and removes it: two list changes.
func (h *httpMachine) changeList(t *rapid.T, kind string) {
	h.tools++
	name := fmt.Sprintf("listed_%d", h.tools)
	switch kind {
	case "tools":
		h.registerNop(t, name)
		h.rt.RemoveTool(name)
	case "prompts":
		err := h.rt.RegisterPrompt(mcpruntime.Prompt{Prompt: mcp.Prompt{Name: name}, Access: mcpruntime.AccessRead,
			Handler: func(context.Context, *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{}, nil
			}})
		if err != nil {
			t.Fatalf("RegisterPrompt(%s): %v", name, err)
		}
		h.rt.RemovePrompt(name)
	case "resources":
		uri := "test://" + name
		err := h.rt.RegisterResource(mcpruntime.Resource{Resource: mcp.Resource{URI: uri, Name: name}, Access: mcpruntime.AccessRead,
			Handler: func(context.Context, *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{}, nil
			}})
		if err != nil {
			t.Fatalf("RegisterResource(%s): %v", uri, err)
		}
		h.rt.RemoveResource(uri)
	}
}

// registerNop registers a read tool that does nothing.
func (h *httpMachine) registerNop(t *rapid.T, name string) {
	if err := h.rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: name}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		}}); err != nil {
		t.Fatalf("RegisterTool(%s): %v", name, err)
	}
}

// postSomething posts as a caller the model says may mutate, to its own
// thread or another, and returns the transcript the post updated; false
// if there is no such caller or the model refuses the post.
func (h *httpMachine) postSomething(t *rapid.T) (string, bool) {
	var mutators []*modelCred
	for _, c := range h.m.creds {
		if h.m.mayMutate(c) {
			mutators = append(mutators, c)
		}
	}
	if len(mutators) == 0 {
		return "", false
	}
	c := pick(t, "poster", mutators)
	target := h.genTarget(t)
	h.texts++
	text := fmt.Sprintf("listened message %d", h.texts)
	call := fmt.Sprintf("Post(%s, %q, %q)", c.describe(), target, text)
	_, wantE := h.m.post(c, target, text)
	_, err := h.rt.Post(h.ctx, h.m.principal(c), target, text)
	wantErr(t, call, err, wantE)
	if err != nil {
		return "", false
	}
	id := target
	if id == "" {
		id = c.thread
	}
	return mcpruntime.TranscriptURI(id), true
}

// ---- invariants after every step ----

// watchListens registers, once, the cleanup that ends every listen the
// machine opened: an open stream would hold the test server's Close.
func (h *httpMachine) watchListens(t *rapid.T) {
	if h.listenCleanup {
		return
	}
	h.listenCleanup = true
	t.Cleanup(func() {
		h.listenMu.Lock()
		defer h.listenMu.Unlock()
		for _, s := range h.opened {
			s.cancel()
		}
	})
}

// listenFate is what the model says of an open listen stream now.
type listenFate uint8

const (
	listenOpen  listenFate = iota // its credential is live: nothing may end it
	listenMaybe                   // only expired: the runtime may not have noticed
	listenEnded                   // its credential is revoked or removed
)

func (h *httpMachine) listenFate(s *listenStream) listenFate {
	c := h.m.credOf(s.token)
	switch {
	case c == nil || c.state != credLive:
		return listenEnded
	case h.m.expired(c):
		return listenMaybe
	}
	return listenOpen
}

// checkListens holds every open listen stream to its fate (SPEC §6.9), and
// every frame it carried to its filter.
func (h *httpMachine) checkListens(t *rapid.T) {
	t.Helper()
	deadline := time.Now().Add(listenCloseBound)
	left := h.listens[:0]
	for _, s := range h.listens {
		what := fmt.Sprintf("listen stream %s of %s", s.id, s.ns)
		switch h.listenFate(s) {
		case listenEnded:
			if !s.waitEnd(deadline) {
				t.Fatalf("%s: its credential is dead, the stream still open %v later", what, listenCloseBound)
			}
		case listenMaybe:
			if !s.ended() {
				left = append(left, s)
			}
		case listenOpen:
			if s.ended() {
				t.Fatalf("%s ended while its credential is live; it carried %q", what, s.snapshot())
			}
			left = append(left, s)
		}
		allowed := s.filter.allowed(s.id)
		for i, fr := range s.snapshot() {
			if i == 0 {
				continue // the acknowledgement, checked when it came
			}
			if !allowed[fr] {
				t.Fatalf("%s (honoured %+v) carried %s", what, s.filter, fr)
			}
		}
	}
	clear(h.listens[len(left):])
	h.listens = left
	h.settle(t)
}

// finishListens ends the endpoint's streams as a shutdown does: every
// listen stream still open gets its request's complete result, naming the
// subscription, then ends; a new listen is 503.
func (h *httpMachine) finishListens(t *rapid.T) {
	t.Helper()
	h.checkListens(t)
	ep, ok := h.srv.(*mcpruntime.MCPEndpoint)
	if !ok || len(h.listens) == 0 {
		return
	}
	ep.CloseStreams()
	for _, s := range h.listens {
		what := fmt.Sprintf("at shutdown, listen stream %s of %s", s.id, s.ns)
		if !s.waitEnd(time.Now().Add(waitTimeout)) {
			t.Fatalf("%s: still open after %v", what, waitTimeout)
		}
		fr := s.snapshot()
		var last struct {
			ID     json.RawMessage `json:"id"`
			Result map[string]json.RawMessage
		}
		if len(fr) < 2 || json.Unmarshal([]byte(fr[len(fr)-1]), &last) != nil || string(last.ID) != s.id || string(last.Result["resultType"]) != `"complete"` {
			t.Fatalf("%s: the stream carried %q, want its request's complete result last", what, fr)
		}
		var meta map[string]json.RawMessage
		if json.Unmarshal(last.Result["_meta"], &meta) != nil || string(meta[metaSubID]) != s.id {
			t.Fatalf("%s: the result %s does not name subscription %s", what, fr[len(fr)-1], s.id)
		}
		for _, x := range fr[1 : len(fr)-1] {
			if !s.filter.allowed(s.id)[x] {
				t.Fatalf("%s (honoured %+v) carried %s", what, s.filter, x)
			}
		}
	}
	s := h.listens[0]
	r, err := h.openListen(caller{token: s.token}, "", "0", listenFilter{})
	if err != nil {
		t.Fatalf("a listen after the shutdown: %v", err)
	}
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("a listen after the shutdown = %d %s, want 503", r.status, r.body)
	}
	h.listens = nil
	h.settle(t)
}
