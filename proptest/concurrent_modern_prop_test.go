package proptest

import (
	"fmt"
	"net/http"
	"time"

	"pgregory.net/rapid"
)

// The concurrent machine's 2026-07-28 traffic (SPEC §6.9): stateless
// tools/calls (thread_read, thread_post) and listen streams in the batches
// that race revocation, switch, archive and rotate, explained like the
// session requests are. A modern request authenticates when it arrives and
// again at dispatch, and its credential is watched from the start, so:
// a 401 is explained where its token is dead — or, for a post, where the
// model lets the post happen when the runtime's thread shows it did (a
// revocation of the batch cancelled the call after its effect: SPEC §5a.5
// answers a cancelled JSON call 401); a 200 where the request was admitted
// at or before its place, with the tool's answer at its place (a post
// whose caller was revoked in between is refused, invariant 6). A listen
// answered 200 starts with the acknowledgement the model says at its
// place; one whose credential died before its stream started is a 401
// like any (this machine found it answered an empty 200). Once an order
// explains the batch, each listen stream that acknowledged joins the
// machine's open streams, and Check holds it to its fate in the agreed
// model: ended within listenCloseBound if the batch revoked its
// credential. A batch draws a listen only while its namespace has room
// for one more, counting the batch's own, so that no 429 needs explaining.
// Every op names its credential by token: the model the batch started
// from is replaced by the agreed one.

// listenObs is what a listen of a batch observed.
type listenObs struct{ s *listenStream }

func (o listenObs) String() string {
	return fmt.Sprintf("%d %s %q (ended %v)", o.s.status, o.s.body, o.s.snapshot(), o.s.ended())
}

// admittedIn reports whether some state of st admits who (a request
// authenticates when it arrives, which is at or before its place).
func admittedIn(st []world, who caller) bool {
	for _, w := range st {
		if a, _ := admit(w.m, w.mcp, who, ""); a == 0 {
			return true
		}
	}
	return false
}

// modernOp draws a modern operation of a batch: kind mpost, mread or
// listen, by who, carrying the stale session id sid.
func (h *httpMachine) modernOp(t *rapid.T, kind string, who caller, sid string) *cop {
	if kind == "listen" {
		if c := h.m.credOf(who.token); who.missing || c == nil || !h.m.live(c) {
			return h.listenOp(t, who) // 401
		} else if ns := h.m.principal(c).Namespace; h.openListens(ns)+h.pendingListens[ns] < listenPerNamespace {
			h.pendingListens[ns]++
			return h.listenOp(t, who)
		}
		kind = "mread"
	}
	target := h.genTarget(t)
	args := map[string]string{}
	if target != "" {
		args["threadId"] = target
	}
	tool := "thread_read"
	if kind == "mpost" {
		tool = "thread_post"
		h.texts++
		args["text"] = fmt.Sprintf("modern batch message %d", h.texts)
	}
	text := args["text"]
	body := modernCallBody(h.nextID(), tool, args)
	h.issued++
	op := &cop{desc: fmt.Sprintf("modern tools/call %s %v (%v, stale session %q)", tool, args, who, sid)}
	op.run = func() any { return h.doWith(http.MethodPost, who, sid, body, modernToolHeader(tool)) }
	op.sim = func(st []world, obs any) string {
		r := obs.(result)
		cur := st[len(st)-1]
		now, c := admit(cur.m, cur.mcp, who, "")
		if r.header.Get("Mcp-Session-Id") != "" {
			return "a session id echoed"
		}
		predict := func(c *modelCred) toolOutcome {
			if kind == "mpost" {
				return applyPost(cur.m, c, target, text)
			}
			return predictRead(cur.m, c, target)
		}
		switch r.status {
		case http.StatusUnauthorized:
			if kind == "mpost" && op.revokeRacing && h.posted(text) {
				if c := cur.m.credOf(who.token); !who.missing && c != nil && !predict(c).isError {
					return ""
				}
				return "a post answered 401 happened, and the model refuses it here"
			}
			if now != http.StatusUnauthorized {
				return "401 for an admitted request"
			}
			return ""
		case http.StatusOK:
			if !admittedIn(st, who) {
				return fmt.Sprintf("200 for a request the model never admits (%d)", now)
			}
			got, err := parseTool(r.body)
			if err != nil {
				return err.Error()
			}
			if c == nil {
				c = cur.m.credOf(who.token)
			}
			if want := predict(c); got != want {
				return fmt.Sprintf("tool answer %+v, model %+v", got, want)
			}
			return ""
		}
		return fmt.Sprintf("unexpected status %d", r.status)
	}
	return op
}

// listenOp is a listen of a batch with a fresh id and any filter.
func (h *httpMachine) listenOp(t *rapid.T, who caller) *cop {
	h.ensureResources(t) // the model's mayRead assumes them
	h.watchListens(t)
	asked := genFilter(t)
	id := jsonString(fmt.Sprintf("L%d", h.nextID()))
	var s *listenStream
	op := &cop{desc: fmt.Sprintf("subscriptions/listen id %s %+v (%v)", id, asked, who)}
	op.run = func() any {
		var err error
		if s, err = h.openListen(who, "", id, asked); err != nil {
			return result{err: err}
		}
		if s.status == http.StatusOK {
			s.waitFrames(1, time.Now().Add(waitTimeout))
		}
		return listenObs{s}
	}
	op.sim = func(st []world, obs any) string {
		o, ok := obs.(listenObs)
		if !ok {
			return fmt.Sprintf("observed %v", obs)
		}
		cur := st[len(st)-1]
		now, _ := admit(cur.m, cur.mcp, who, "")
		switch o.s.status {
		case http.StatusUnauthorized:
			if now != http.StatusUnauthorized {
				return "401 for an admitted listen"
			}
			return ""
		case http.StatusOK:
			if !admittedIn(st, who) {
				return fmt.Sprintf("200 for a listen the model never admits (%d)", now)
			}
			fr := o.s.snapshot()
			if len(fr) == 0 {
				// Dead before its stream started, it is 401
				// (TestListenDeadAfterDispatchIs401).
				return "200 without an acknowledgement"
			}
			if want := ackFrame(id, honour(cur.m, cur.m.credOf(who.token), asked)); fr[0] != want {
				return fmt.Sprintf("acknowledgement %s, model %s", fr[0], want)
			}
			return ""
		}
		return fmt.Sprintf("unexpected status %d", o.s.status)
	}
	op.agreed = func() {
		if s == nil || s.status != http.StatusOK || len(s.snapshot()) == 0 {
			return
		}
		c := h.m.credOf(who.token)
		s.ns, s.filter = h.m.principal(c).Namespace, honour(h.m, c, asked)
		h.listens = append(h.listens, s)
	}
	return op
}
