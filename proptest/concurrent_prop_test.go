package proptest

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/actortest"
)

// The concurrent machine is the HTTP machine plus one more action, Batch:
// 2–5 operations run at once in goroutines released together, and the
// observed answers must be explained by SOME sequential order of the batch
// applied to the model (a linearizability check by depth-first search over
// the orders, pruned at the first answer an order cannot explain; 5! = 120
// orders at most). The order found becomes the model's state, and the
// machine's Check then holds the invariants of SPEC §6 (1, 2, 3, 6, 7) and
// model agreement whatever the order was.
//
// An HTTP request is not one atomic step: it authenticates and looks its
// session up first, and reaches the session and the tool later. So an
// answer past authentication is explained at its place in the order if the
// request was admitted in some state at or before that place (and for a
// tool call, the tool's answer is the model's at that place: a mutation
// whose caller was revoked in between is refused, invariant 6); a 404 is
// also explained when the session ended (DELETE, or its owner's
// revocation) between admission and dispatch, and a call whose session
// ended under it gets that 404 too, so a post answered 404 may have
// happened: the runtime's thread shows whether it did.
//
// Batches favour the races SPEC §6 cares about: most HTTP operations of a
// batch share one focus token and session, and the lifecycle operations aim
// at the focus's thread or grant — revoke vs in-flight requests on the
// same token, switch vs mutation, DELETE vs call, archive vs open.

// world is a model state the search tries orders on.
type world struct {
	m   *model
	mcp *mcpState
}

func (w world) clone() world { return world{m: w.m.clone(), mcp: w.mcp.clone()} }

// cop is one operation of a batch.
type cop struct {
	desc string
	run  func() any // against the runtime; returns what it observed
	// sim checks obs at the end of states (states[len-1] is the state
	// before this op; it may change it) and returns why not, "" if
	// explained.
	sim func(states []world, obs any) string
	obs any
	// getSID: a GET's session id; sharedStream: another GET of the batch
	// names it too, so a 409 is explained.
	getSID       string
	sharedStream bool
	// openPair / rotatePair: the (thread, instance) an open or a rotate
	// names; openRacing: an open of the batch names the rotate's pair, so
	// ErrBusy ("provider session open in progress", documented for Rotate)
	// is explained, with no effect.
	openPair, rotatePair string
	openRacing           bool
	// callSID / deleteSID: a tool call's or a DELETE's session id;
	// deleteRacing: a DELETE of the batch names the call's session, so a
	// call cancelled in flight is explained.
	callSID, deleteSID string
	deleteRacing       bool
	// twinOpen: another open of the batch names the same pair. The runtime
	// joins an open to one of the same pair in flight, and both get its
	// answer, so an injected driver failure reaching both is explained
	// (with no effect: what the failed open minted is revoked).
	twinOpen *cop
	// revokeRacing: another op of the batch can revoke credentials, so a
	// modern call cancelled in flight after its effect is explained.
	revokeRacing bool
	// agreed, if set, runs once an order explained the batch, on the
	// agreed model (a listen joins the machine's open streams).
	agreed func()
}

// concurrentWeight favours Batch.
var concurrentWeight = map[string]int{
	"Batch":               6,
	"CreateThread":        1,
	"OpenProviderSession": 2,
	"StartRun":            2,
	"IssueClient":         1,
	"Initialize":          3,
}

func concurrentProp(t *rapid.T) {
	s := newHTTPMachine(t)
	actions := rapid.StateMachineActions(s)
	actions["Batch"] = s.batch
	t.Repeat(weighted(actions, concurrentWeight))
	s.finish(t)
}

// TestConcurrentMachine runs the concurrent state machine.
func TestConcurrentMachine(t *testing.T) {
	rapid.Check(t, limited(machineChecks(3), concurrentProp))
}

// batch draws 2–5 operations, runs them at once, and explains the answers.
func (h *httpMachine) batch(t *rapid.T) {
	focus := h.genCaller(t)
	focusSID := h.genSession(t, focus)
	h.pendingListens = map[string]int{}
	n := rapid.IntRange(2, 5).Draw(t, "batchSize")
	ops := make([]*cop, n)
	for i := range ops {
		ops[i] = h.genOp(t, focus, focusSID)
	}
	for i, a := range ops {
		for j, b := range ops {
			if i != j && a.getSID != "" && a.getSID == b.getSID {
				a.sharedStream = true
			}
			if a.rotatePair != "" && a.rotatePair == b.openPair {
				a.openRacing = true
			}
			if a.callSID != "" && a.callSID == b.deleteSID {
				a.deleteRacing = true
			}
			if a.callSID != "" && i != j && revokes(b.desc) {
				// A revocation may leave the call's owner namespace with no
				// live credential: the session ends and cancels the call in
				// flight, as a DELETE would.
				a.deleteRacing = true
			}
			if i != j && revokes(b.desc) {
				a.revokeRacing = true
			}
			if i != j && a.openPair != "" && a.openPair == b.openPair {
				a.twinOpen = b
			}
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			op.obs = op.run()
		}()
	}
	close(start)
	wg.Wait()
	h.settle(t)
	for _, op := range ops {
		if r, ok := op.obs.(result); ok && r.err != nil {
			t.Fatalf("%s: %v", op.desc, r.err)
		}
	}
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "\n  %s → %s", op.desc, describeObs(op.obs))
	}
	var found []explained
	agreed, ok := h.explain([]world{{m: h.m, mcp: h.mcp}}, ops, make([]bool, len(ops)), nil, &found)
	if ok {
		h.lastBatch = fmt.Sprintf("%s\nexplained by the order %q", b.String(), agreed.order)
		t.Logf("batch:%s", h.lastBatch)
		h.lifecycleMachine.m, h.mcp = agreed.w.m, agreed.w.mcp
		for _, op := range ops {
			if op.agreed != nil {
				op.agreed()
			}
		}
		return
	}
	if len(found) == 0 {
		var first strings.Builder
		for _, op := range ops {
			w := world{m: h.m, mcp: h.mcp}
			fmt.Fprintf(&first, "\n  %s: %s", op.desc, op.sim([]world{w, w.clone()}, op.obs))
		}
		t.Fatalf("no sequential order of the batch explains the answers:%s\nas the first of the order, each op is (\"\": explained):%s", b.String(), first.String())
	}
	// Several orders may explain the answers yet leave different states
	// (two opens of one thread: which chose its current instance); one of
	// them must leave the state the runtime shows.
	var orders strings.Builder
	for _, e := range found {
		fmt.Fprintf(&orders, "\n  %q: %s", e.order, e.why)
	}
	t.Fatalf("the orders that explain the batch's answers:%s\nall leave a state the runtime does not show (first %d):%s", b.String(), len(found), orders.String())
}

// explained is an order of a batch that explains its answers but leaves a
// state the runtime does not show, or (agreed) the one that does.
type explained struct {
	order []string
	w     world
	why   string
}

// maxReported bounds how many disagreeing orders a failure reports.
const maxReported = 8

// explain searches the orders of the unused ops that explain their answers
// from the last state of states on, for one whose final state agrees with
// the runtime; it keeps the first few that do not in found.
func (h *httpMachine) explain(states []world, ops []*cop, used []bool, order []string, found *[]explained) (explained, bool) {
	done := true
	for i, op := range ops {
		if used[i] {
			continue
		}
		done = false
		next := states[len(states)-1].clone()
		trial := append(states[:len(states):len(states)], next)
		if op.sim(trial, op.obs) != "" {
			continue
		}
		used[i] = true
		e, ok := h.explain(trial, ops, used, append(order[:len(order):len(order)], op.desc), found)
		used[i] = false
		if ok {
			return e, true
		}
	}
	if !done {
		return explained{}, false
	}
	e := explained{order: order, w: states[len(states)-1]}
	if e.why = h.disagreement(e.w); e.why == "" {
		return e, true
	}
	if len(*found) < maxReported {
		*found = append(*found, e)
	}
	return explained{}, false
}

// disagreement says how the runtime's threads and tokens differ from w's,
// "" if they agree.
func (h *httpMachine) disagreement(w world) string {
	for _, id := range threadPool {
		got, err := h.rt.Thread(h.ctx, id)
		if w.m.threads[id] == nil {
			if !errors.Is(err, mcpruntime.ErrUnknownThread) {
				return fmt.Sprintf("Thread(%s) exists", id)
			}
			continue
		}
		if err != nil {
			return fmt.Sprintf("Thread(%s) = %v", id, err)
		}
		if diff := cmp.Diff(w.m.thread(id), got, cmpOpts); diff != "" {
			return fmt.Sprintf("Thread(%s) (-model +runtime):\n%s", id, diff)
		}
	}
	// Provider sessions: which are open, which threads each serves and
	// which credentials it holds. A detach answers the same whatever it
	// detached, so only this tells its orders apart.
	got := map[string]mcpruntime.ProviderSessionInfo{}
	for _, ps := range h.rt.ProviderSessions("") {
		got[ps.ID] = ps
	}
	for _, ms := range w.m.sessions {
		ps, isOpen := got[ms.id]
		delete(got, ms.id)
		switch {
		case !ms.open && isOpen:
			return fmt.Sprintf("provider session %s is open", ms.id)
		case !ms.open:
		case !isOpen:
			return fmt.Sprintf("provider session %s is not open", ms.id)
		case !sameSet(ms.threads, ps.Threads) || !sameSet(w.liveOf(ms.creds), w.liveOf(ps.Credentials)):
			return fmt.Sprintf("provider session %s serves %v holding %v, model %v holding %v", ms.id, ps.Threads, ps.Credentials, ms.threads, ms.creds)
		}
	}
	for id := range got {
		return fmt.Sprintf("provider session %s is open, unknown to the model", id)
	}
	for _, c := range w.m.creds {
		_, err := h.rt.Authenticate(c.token)
		want := w.m.authFailure(c)
		var ae *mcpruntime.AuthError
		switch {
		case want == "" && err != nil:
			return fmt.Sprintf("%s (%s) does not authenticate: %v", c.id, c.describe(), err)
		case want != "" && (!errors.As(err, &ae) || ae.Reason != want):
			return fmt.Sprintf("%s (%s): Authenticate = %v, want %s", c.id, c.describe(), err, want)
		}
	}
	return ""
}

// liveOf returns the ids in ids of credentials live in w. Which dead
// credentials a session's record still lists (one an aborted open handed
// it, say) has no effect: holding only matters for live ones.
func (w world) liveOf(ids []string) []string {
	var out []string
	for _, id := range ids {
		if c := w.m.credByID[id]; c != nil && w.m.authFailure(c) == "" {
			out = append(out, id)
		}
	}
	return out
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func describeObs(obs any) string {
	switch o := obs.(type) {
	case result:
		return fmt.Sprintf("%d %s", o.status, strings.TrimSpace(string(o.body)))
	case error:
		return fmt.Sprintf("error %v", o)
	case nil:
		return "ok"
	case lobs:
		return o.String()
	}
	return fmt.Sprintf("%+v", obs)
}

// opKinds and their weights.
var opKinds = []string{
	"post", "post", "post", "read", "get", "get", "delete", "delete",
	"revokeClient", "revokeClient", "switch", "switch", "archive", "archive",
	"open", "open", "endRun", "rotate", "release", "startRun", "detach",
	"mpost", "mpost", "mread", "listen", "listen",
}

// genOp draws one operation, mostly aimed at the focus.
func (h *httpMachine) genOp(t *rapid.T, focus caller, focusSID string) *cop {
	who, sid := focus, focusSID
	if rapid.IntRange(0, 3).Draw(t, "unfocused") == 0 {
		who = h.genCaller(t)
		sid = h.genSession(t, who)
	}
	fc := h.m.credOf(focus.token)
	thread := h.genThread(t)
	if fc != nil && fc.kind == kindProvider && rapid.Bool().Draw(t, "focusThread") {
		thread = fc.thread
	}
	inst := genInstanceID().Draw(t, "instance")
	if mt := h.m.threads[thread]; mt != nil && mt.instance != "" && rapid.Bool().Draw(t, "current") {
		inst = mt.instance
	}
	switch kind := rapid.SampledFrom(opKinds).Draw(t, "op"); kind {
	case "mpost", "mread", "listen":
		return h.modernOp(t, kind, who, sid)
	case "post", "read":
		target := h.genTarget(t)
		args := map[string]string{}
		if target != "" {
			args["threadId"] = target
		}
		tool := "thread_read"
		if kind == "post" {
			tool = "thread_post"
			h.texts++
			args["text"] = fmt.Sprintf("batch message %d", h.texts)
		}
		body := callBody(h.nextID(), tool, args)
		text := args["text"]
		op := h.httpOp(fmt.Sprintf("tools/call %s %v (%v, session %q)", tool, args, who, sid), kind, http.MethodPost, who, sid, body,
			func(w world, c *modelCred) toolOutcome {
				if kind == "post" {
					return applyPost(w.m, c, target, args["text"])
				}
				return predictRead(w.m, c, target)
			}, text)
		op.callSID = sid
		return op
	case "get":
		op := h.httpOp(fmt.Sprintf("GET (%v, session %q)", who, sid), kind, http.MethodGet, who, sid, nil, nil, "")
		op.getSID = sid
		return op
	case "delete":
		op := h.httpOp(fmt.Sprintf("DELETE (%v, session %q)", who, sid), kind, http.MethodDelete, who, sid, nil, nil, "")
		op.deleteSID = sid
		return op
	case "revokeClient":
		id := h.pickClient(t)
		if fc != nil && fc.kind == kindClient && rapid.Bool().Draw(t, "focusClient") {
			id = fc.client
		}
		return h.revokeClientOp(id)
	case "switch":
		return &cop{
			desc: fmt.Sprintf("SwitchProvider(%s, %s)", thread, inst),
			run: func() any {
				res, err := h.rt.SwitchProvider(h.ctx, thread, inst)
				return lobs{res, err}
			},
			sim: func(st []world, obs any) string {
				o := obs.(lobs)
				res, _ := o.v.(mcpruntime.SwitchResult)
				prev, ended, want := st[len(st)-1].m.switchProvider(thread, inst)
				if why := sameErr(o.err, want); why != "" {
					return why
				}
				if o.err == nil && (res.Previous != prev || res.EndedRun != ended) {
					return fmt.Sprintf("want Previous %q EndedRun %q", prev, ended)
				}
				return ""
			},
		}
	case "archive":
		return &cop{
			desc: fmt.Sprintf("Archive(%s)", thread),
			run:  func() any { return h.rt.Archive(h.ctx, thread) },
			sim: func(st []world, obs any) string {
				return sameErr(obs, st[len(st)-1].m.archive(thread))
			},
		}
	case "endRun":
		return &cop{
			desc: fmt.Sprintf("EndRun(%s)", thread),
			run:  func() any { return h.rt.EndRun(h.ctx, thread, "") },
			sim: func(st []world, obs any) string {
				return sameErr(obs, st[len(st)-1].m.endRun(thread, ""))
			},
		}
	case "startRun":
		return &cop{
			desc: fmt.Sprintf("StartRun(%s, %s)", thread, inst),
			run: func() any {
				id, err := h.rt.StartRun(h.ctx, thread, inst)
				return lobs{id, err}
			},
			sim: func(st []world, obs any) string {
				o, m := obs.(lobs), st[len(st)-1].m
				id, _ := o.v.(string)
				if why := sameErr(o.err, m.predictStartRun(thread, inst)); why != "" || o.err != nil {
					return why
				}
				m.applyStartRun(thread, inst, id)
				return ""
			},
		}
	case "rotate":
		op := &cop{rotatePair: thread + "/" + inst}
		*op = cop{
			rotatePair: op.rotatePair,
			desc:       fmt.Sprintf("Rotate(%s, %s)", thread, inst),
			run: func() any {
				c, err := h.rt.Rotate(h.ctx, thread, inst)
				return lobs{c, err}
			},
			sim: func(st []world, obs any) string {
				o, m := obs.(lobs), st[len(st)-1].m
				cred, _ := o.v.(mcpruntime.Credential)
				want := m.predictRotate(thread, inst)
				if want == nil && op.openRacing && errors.Is(o.err, mcpruntime.ErrBusy) {
					return ""
				}
				if why := sameErr(o.err, want); why != "" || o.err != nil {
					return why
				}
				m.applyRotate(thread, inst, cred.ID, strings.TrimPrefix(cred.Authorization, "Bearer "))
				return ""
			},
		}
		return op
	case "detach":
		return &cop{
			desc: fmt.Sprintf("Detach(%s)", thread),
			run:  func() any { return h.rt.Detach(h.ctx, thread) },
			sim: func(st []world, obs any) string {
				return sameErr(obs, st[len(st)-1].m.detach(thread))
			},
		}
	case "release":
		id := unknownSession
		if len(h.m.sessions) > 0 && rapid.IntRange(0, 7).Draw(t, "unknown") > 0 {
			id = pick(t, "session", h.m.sessions).id
		}
		return &cop{
			desc: fmt.Sprintf("ReleaseProviderSession(%s)", id),
			run:  func() any { return h.rt.ReleaseProviderSession(h.ctx, id) },
			sim: func(st []world, obs any) string {
				return sameErr(obs, st[len(st)-1].m.release(id))
			},
		}
	default: // open
		op := &cop{openPair: thread + "/" + inst}
		*op = cop{
			openPair: op.openPair,
			desc:     fmt.Sprintf("OpenProviderSession(%s, %s)", thread, inst),
			run: func() any {
				ps, err := h.rt.OpenProviderSession(h.ctx, thread, inst)
				return lobs{ps, err}
			},
			sim: func(st []world, obs any) string {
				o, m := obs.(lobs), st[len(st)-1].m
				ps, _ := o.v.(mcpruntime.ProviderSession)
				out := m.predictOpen(thread, inst)
				if out.err == nil && op.twinOpen != nil && actortest.OpenFailed(o.err, errInjected) {
					if twin, ok := op.twinOpen.obs.(lobs); ok && actortest.OpenFailed(twin.err, errInjected) {
						return ""
					}
				}
				if why := sameErr(o.err, out.err); why != "" {
					return why
				}
				switch {
				case out.failed:
					m.applyOpenFailure(inst)
					return ""
				case o.err != nil:
					return ""
				case out.reused:
					if !ps.Reused || ps.ID != out.session.id || ps.CredentialID != out.cred.id {
						return fmt.Sprintf("want reuse of %s with %s", out.session.id, out.cred.id)
					}
				case ps.Reused || m.credByID[ps.CredentialID] != nil:
					return "want a new credential"
				case out.attach && ps.ID != out.session.id:
					return fmt.Sprintf("want session %s", out.session.id)
				case !out.attach && m.sessByID[ps.ID] != nil:
					return "want a new session"
				}
				tok := ""
				if !out.reused {
					tok = strings.TrimPrefix(ps.Authorization, "Bearer ")
				}
				m.applyOpen(thread, inst, out, ps.ID, ps.CredentialID, tok)
				return ""
			},
		}
		return op
	}
}

// sameErr compares an observed error (an any holding error or nil) with
// the model's.
func sameErr(obs any, want error) string {
	got, _ := obs.(error)
	if o, ok := obs.(lobs); ok {
		got = o.err
	}
	switch {
	case want == nil && got != nil:
		return fmt.Sprintf("got %v, want success", got)
	case want != nil && !errors.Is(got, want):
		return fmt.Sprintf("got %v, want %v", got, want)
	}
	return ""
}

// httpOp is one HTTP request of a batch (kind post, read, get or delete).
func (h *httpMachine) httpOp(desc, kind, method string, who caller, sid string, body []byte, tool func(world, *modelCred) toolOutcome, text string) *cop {
	h.issued++
	op := &cop{desc: desc}
	*op = cop{
		desc: desc,
		run:  func() any { return h.do(method, who, sid, body) },
		sim: func(st []world, obs any) string {
			r := obs.(result)
			cur := st[len(st)-1]
			now, c := admit(cur.m, cur.mcp, who, sid)
			admittedBefore := false
			for _, w := range st {
				if a, _ := admit(w.m, w.mcp, who, sid); a == 0 {
					admittedBefore = true
				}
			}
			gone := false // the session ended (or its owner died) by now
			if s := cur.mcp.byID[sid]; s != nil {
				gone = s.deleted || cur.m.namespaceState(s.owner) != nsLive
			}
			switch r.status {
			case http.StatusUnauthorized:
				if now != http.StatusUnauthorized {
					return "401 for an admitted request"
				}
				return ""
			case http.StatusNotFound:
				if kind == "post" && op.deleteRacing && admittedBefore && h.posted(text) {
					// A call whose session ended under it (a DELETE or a
					// revocation of the batch) gets the session's 404
					// whether or not its tool ran to the end (SPEC §5.2):
					// the runtime's thread shows the post happened, so it
					// happened here, if the model lets it.
					if c == nil {
						c = cur.m.credOf(who.token)
					}
					if out := tool(cur, c); out.isError {
						return "a post answered 404 happened though the model refuses it"
					}
					return ""
				}
				if now == http.StatusNotFound || (admittedBefore && gone) {
					return ""
				}
				return fmt.Sprintf("404, model admits %d", now)
			}
			if !admittedBefore {
				return fmt.Sprintf("%d for a request the model never admits (%d)", r.status, now)
			}
			if s := cur.mcp.byID[sid]; s != nil && s.deleted {
				return fmt.Sprintf("%d for a DELETEd session", r.status)
			}
			if sid == "" {
				if r.status != http.StatusBadRequest {
					return fmt.Sprintf("%d without a session, want 400", r.status)
				}
				return ""
			}
			if c == nil {
				c = cur.m.credOf(who.token)
			}
			switch kind {
			case "get":
				if r.status == http.StatusOK || (r.status == http.StatusConflict && op.sharedStream) {
					// 409: another GET of the batch held the stream.
					return ""
				}
			case "delete":
				if r.status == http.StatusNoContent {
					cur.mcp.byID[sid].deleted = true
					return ""
				}
			default:
				if r.status != http.StatusOK {
					break
				}
				got, err := parseTool(r.body)
				if err != nil {
					return err.Error()
				}
				if got.isError && got.code == "" && op.deleteRacing && strings.Contains(string(r.body), "context canceled") {
					// A DELETE of the batch cancelled the call in flight
					// (SPEC §5); its effect may or may not have happened: the
					// runtime's thread shows which.
					if kind == "post" && h.posted(text) {
						if out := tool(cur, c); out.isError {
							return "a cancelled post happened though the model refuses it"
						}
					}
					return ""
				}
				if want := tool(cur, c); got != want {
					return fmt.Sprintf("tool answer %+v, model %+v", got, want)
				}
				return ""
			}
			return fmt.Sprintf("unexpected status %d", r.status)
		},
	}
	return op
}

func (h *httpMachine) revokeClientOp(id string) *cop {
	return &cop{
		desc: fmt.Sprintf("RevokeClient(%s)", id),
		run:  func() any { return h.rt.RevokeClient(h.ctx, id) },
		sim: func(st []world, obs any) string {
			return sameErr(obs, st[len(st)-1].m.revokeClient(id))
		},
	}
}

// lobs is what a lifecycle call of a batch returned.
type lobs struct {
	v   any
	err error
}

func (o lobs) String() string {
	if o.err != nil {
		return "error " + o.err.Error()
	}
	return fmt.Sprintf("%+v", o.v)
}

// posted reports whether some thread of the runtime holds a message with
// text (texts are unique).
func (h *httpMachine) posted(text string) bool {
	for _, id := range threadPool {
		th, err := h.rt.Thread(h.ctx, id)
		if err != nil {
			continue
		}
		for _, m := range th.Messages {
			if m.Text == text {
				return true
			}
		}
	}
	return false
}

// revokes reports whether an operation of a batch can revoke credentials
// (an open replaces the pair's credential it does not reuse).
func revokes(desc string) bool {
	for _, p := range []string{"Archive(", "Rotate(", "ReleaseProviderSession(", "RevokeClient(", "DeleteThread(", "OpenProviderSession(", "RefreshClient("} {
		if strings.HasPrefix(desc, p) {
			return true
		}
	}
	return false
}
