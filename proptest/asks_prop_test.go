package proptest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The HTTP machine's asks (SPEC §5b.18–22): the tool ask_confirm asks its
// client to confirm (an elicitation) and answers "confirmed <ok>". An Ask
// action calls it on a session its caller owns and leaves the ask
// pending; an Answer action posts a response with a pending ask's id, from
// any token, naming any session. The model says what happens: a response
// that is not admitted (401, the foreign session's 404) reaches nothing; an
// admitted one (202) answers the ask of that id in the session it names,
// if there is one — never another session's. After every step each
// pending ask is checked: still pending (its stream open, no result) while
// its session and its request's credential live — across switches and
// everything else —, ended with no result once its session is deleted or
// its owner's or its request's credential revoked.

// askTool is the machine's asking tool.
const askTool = "ask_confirm"

// registerAskTool registers ask_confirm on rt.
func registerAskTool(t *rapid.T, rt *mcpruntime.Runtime) {
	err := rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: askTool, Description: "asks the client to confirm"},
		Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			if ans, ok := call.Input("ok"); ok {
				r := ans.(*mcp.ElicitResult)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("confirmed %v", r.Content["ok"])}}}, nil
			}
			return mcpruntime.InputRequired(mcp.InputRequestMap{"ok": &mcp.ElicitParams{
				Message:         "Confirm?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}},
			}}, ""), nil
		},
	})
	if err != nil {
		t.Fatalf("RegisterTool(%s): %v", askTool, err)
	}
}

// pendingAsk is one call of ask_confirm whose ask the model has pending.
type pendingAsk struct {
	sid    string     // the session it was called on
	cred   *modelCred // the credential the call was made with
	id     string     // the ask's JSON-RPC id
	stream *askStream
}

// askStream is a call's event stream, read line by line until it ends.
type askStream struct {
	cancel context.CancelFunc
	mu     sync.Mutex // guards lines
	lines  []string
	done   chan struct{}
}

// openAsk POSTs a tools/call of ask_confirm with tok on sid and reads its
// stream; ended counts it once the stream ended (the endpoint has
// counted the request by then: the body ends after its handler returned).
func (h *httpMachine) openAsk(t *rapid.T, tok, sid string) *askStream {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, strings.NewReader(string(callBody(h.nextID(), askTool, nil))))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	s := &askStream{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		resp, err := h.client.Do(req)
		if err != nil {
			return
		}
		defer h.asksEnded.Add(1) // after the body ended: the endpoint counted the request
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
		}
	}()
	return s
}

// messages returns the JSON-RPC messages the stream carried so far.
func (s *askStream) messages() []map[string]json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]json.RawMessage
	for _, l := range s.lines {
		d, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(d), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// result returns the text of the call's result, if the stream carried one.
func (s *askStream) result() (string, bool) {
	for _, m := range s.messages() {
		if raw, ok := m["result"]; ok {
			var r struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			if json.Unmarshal(raw, &r) != nil || len(r.Content) == 0 {
				return string(raw), true
			}
			return r.Content[0].Text, true
		}
	}
	return "", false
}

func (s *askStream) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitEnd waits until the stream ended.
func (s *askStream) waitEnd(t *rapid.T, what string) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(waitTimeout):
		t.Fatalf("%s: the call's stream still open after %v", what, waitTimeout)
	}
}

// Ask calls ask_confirm on a session the caller owns and waits until the
// client is asked.
func (h *httpMachine) Ask(t *rapid.T) {
	type cand struct {
		c   *modelCred
		sid string
	}
	var cands []cand
	for _, s := range h.mcp.sessions {
		if s.deleted || h.m.namespaceState(s.owner) != nsLive {
			continue
		}
		for _, c := range h.m.creds {
			if h.m.live(c) && h.m.principal(c).Namespace == s.owner {
				cands = append(cands, cand{c, s.id})
			}
		}
	}
	if len(cands) == 0 {
		t.Skip("no live session to ask on")
	}
	k := pick(t, "askOn", cands)
	s := h.openAsk(t, k.c.token, k.sid)
	deadline := time.Now().Add(waitTimeout)
	for {
		for _, m := range s.messages() {
			if string(m["method"]) == `"elicitation/create"` {
				var id string
				if json.Unmarshal(m["id"], &id) != nil {
					t.Fatalf("ask with id %s, want a string", m["id"])
				}
				h.asks = append(h.asks, &pendingAsk{sid: k.sid, cred: k.c, id: id, stream: s})
				return
			}
		}
		if s.ended() || time.Now().After(deadline) {
			t.Fatalf("%s on %s: no elicitation/create; the stream carried %q", askTool, k.sid, s.messages())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Answer posts a response with a pending ask's id, from any token, naming
// any session.
func (h *httpMachine) Answer(t *rapid.T) {
	if len(h.asks) == 0 {
		t.Skip("no ask pending")
	}
	a := pick(t, "answer", h.asks)
	who := h.genCaller(t)
	sid := h.genSession(t, who)
	if rapid.IntRange(0, 2).Draw(t, "theAsksSession") == 0 {
		sid = a.sid
	}
	ok := rapid.Bool().Draw(t, "ok")
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%q,"result":{"action":"accept","content":{"ok":%v}}}`, a.id, ok)
	call := fmt.Sprintf("answer %s of %s (%v, session %q)", a.id, a.sid, who, sid)
	want, _ := admit(h.m, h.mcp, who, sid)
	switch {
	case want != 0:
	case sid == "":
		want = http.StatusBadRequest
	default:
		want = http.StatusAccepted
	}
	r := h.exchange(t, call, http.MethodPost, who, sid, func() []byte { return body }, want)
	if r.status != http.StatusAccepted {
		return // reached nothing: checkAsks holds every ask still pending
	}
	for i, p := range h.asks {
		if p.sid != sid || p.id != a.id {
			continue
		}
		fate := h.askFate(p)
		p.stream.waitEnd(t, call)
		p.stream.cancel()
		h.asks = append(h.asks[:i], h.asks[i+1:]...)
		text, answered := p.stream.result()
		if !answered && fate == askMaybe {
			return // its credential expired, and the runtime noticed first
		}
		if want := fmt.Sprintf("confirmed %v", ok); !answered || text != want {
			t.Fatalf("%s: the call answered %q (a result: %v), want %q", call, text, answered, want)
		}
		return
	}
}

// askFate is what the model says of a pending ask now.
type askFate uint8

const (
	askPending askFate = iota // its session and credential live: nothing may end it
	askMaybe                  // only expired: the runtime may not have noticed
	askEnded                  // its session ended or its credential is revoked
)

func (h *httpMachine) askFate(a *pendingAsk) askFate {
	s := h.mcp.byID[a.sid]
	// a.cred is of the model the ask was made in; a concurrent batch since
	// replaced the model with the clone that explains it, so the
	// credential's state now is the current model's copy of it (found by
	// token; a token no model has is none).
	c := h.currentCred(a.cred)
	switch {
	case s == nil || s.deleted || c == nil || c.state != credLive:
		return askEnded
	}
	switch h.m.namespaceState(s.owner) {
	case nsDead:
		return askEnded
	case nsMaybe:
		return askMaybe
	}
	if h.m.expired(c) {
		return askMaybe
	}
	return askPending
}

// checkAsks holds every pending ask to what the model says of it. An ask
// that ended never answered: no answer reached it.
func (h *httpMachine) checkAsks(t *rapid.T) {
	t.Helper()
	left := h.asks[:0]
	for _, a := range h.asks {
		what := fmt.Sprintf("ask %s of %s", a.id, a.sid)
		switch h.askFate(a) {
		case askEnded:
			a.stream.waitEnd(t, what)
			a.stream.cancel()
		case askMaybe:
			if !a.stream.ended() {
				left = append(left, a)
				continue
			}
			a.stream.cancel()
		case askPending:
			if a.stream.ended() {
				t.Fatalf("%s: the call ended while its session and credential live: %q", what, a.stream.messages())
			}
			left = append(left, a)
		}
		if text, ok := a.stream.result(); ok {
			t.Fatalf("%s: the call answered %q though no admitted answer named it", what, text)
		}
	}
	h.asks = left
	h.settle(t)
}

// endAsks waits for the streams of every ask left: finish ended their
// sessions.
func (h *httpMachine) endAsks(t *rapid.T) {
	t.Helper()
	for _, a := range h.asks {
		a.stream.waitEnd(t, "at the end, ask "+a.id)
		a.stream.cancel()
	}
	h.asks = nil
	h.settle(t)
}

// currentCred returns the current model's credential of c's token: the
// model is replaced by a clone after each concurrent batch, so a pointer
// kept across actions may be of an older model.
func (h *httpMachine) currentCred(c *modelCred) *modelCred {
	for _, x := range h.m.creds {
		if x.token == c.token {
			return x
		}
	}
	return nil
}
