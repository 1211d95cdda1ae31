package proptest

import (
	"fmt"
	"slices"
	"sort"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// This file is the model: what the runtime should answer, computed from
// plain maps and slices. It shares no code with the runtime; it only names
// the runtime's exported sentinel errors and result types so that the
// machine can compare. Where SPEC §3 is silent it follows the semantics the
// design note chose (see the package doc of mcpruntime and /tmp/design.md):
// the runtime keeps no tokens, so "reuse" means re-attaching the provider
// session that holds the pair's live credential.

// Principal kinds and access levels as the public API spells them.
const (
	kindProvider = "provider"
	kindClient   = "client"
	readOnly     = "read-only"
	readWrite    = "read-write"
)

// credState is where a credential is in its life.
type credState int

const (
	credLive    credState = iota // not revoked (it may still be past its expiry)
	credRevoked                  // revoked; revokedExpired says which reason was recorded
	credGone                     // its row was removed (thread deleted, grant revoked)
)

// modelCred is one token ever minted: a provider credential or a client
// grant's token.
type modelCred struct {
	token    string
	id       string // credential id; for client tokens learnt from Authenticate
	kind     string // kindProvider or kindClient
	thread   string // provider only
	instance string // provider only
	client   string // client only
	access   string // client only
	audience string // client only: the resource an OAuth-issued token is bound to, "" for admin-issued
	caps     []string
	expires  time.Time // zero: never
	state    credState
	// revokedExpired: it was already past its expiry when revoked, so it
	// fails as expired, not revoked.
	revokedExpired bool
}

// modelSession is one provider session the runtime ever returned.
type modelSession struct {
	id       string
	instance string
	open     bool
	threads  []string // attached threads
	creds    []string // credential ids handed to it (kept across detach)
	// active: when it was opened, or last had a thread attached or
	// detached; idle release counts from here or a later turn.
	active time.Time
}

// modelMessage is one posted message.
type modelMessage struct {
	seq      uint64
	text     string
	author   string
	instance string
	at       time.Time
}

// modelThread is one existing thread (active or archived).
type modelThread struct {
	id          string
	archived    bool
	instance    string // current instance, "" if none yet
	runID       string // "" when no run is active
	runInstance string
	runStarted  time.Time
	created     time.Time
	messages    []modelMessage
	nextSeq     uint64
	// lastTurn: when a run last started or ended, or the thread was touched.
	lastTurn time.Time
}

// modelInstance is a registered provider instance.
type modelInstance struct {
	caps  []string
	multi bool
	turns bool // its sessions take prompts (driver.Turner)
}

// modelClient is a client grant.
type modelClient struct {
	id      string
	access  string
	revoked bool
	// oauthClient: the client_id of the OAuth client that signed in, ""
	// for an admin-issued grant; refresh: every refresh token it was given.
	oauthClient string
	refresh     []modelRefresh
}

// model is the whole expected state of one runtime.
type model struct {
	now       time.Time
	window    time.Duration
	clientTTL time.Duration
	endpoint  string
	// idle: a provider session with no turn on its threads for this long,
	// and no run of its instance in flight on one, is released.
	idle time.Duration

	instances map[string]modelInstance
	threads   map[string]*modelThread // existing threads only

	creds    []*modelCred // every token ever minted, in mint order
	credByID map[string]*modelCred

	sessions []*modelSession // every provider session ever returned
	sessByID map[string]*modelSession

	clients    []*modelClient
	clientByID map[string]*modelClient

	runs []string // every run id ever started, for stale EndRun calls

	// failNext: the driver's next session open for the instance fails.
	failNext map[string]bool
}

func newModel(now time.Time, window, clientTTL, idle time.Duration, endpoint string) *model {
	return &model{
		now:        now,
		window:     window,
		clientTTL:  clientTTL,
		idle:       idle,
		endpoint:   endpoint,
		instances:  map[string]modelInstance{},
		threads:    map[string]*modelThread{},
		credByID:   map[string]*modelCred{},
		sessByID:   map[string]*modelSession{},
		clientByID: map[string]*modelClient{},
		failNext:   map[string]bool{},
	}
}

// ---- credentials ----

// expired reports whether c is past its expiry now.
func (m *model) expired(c *modelCred) bool {
	return !c.expires.IsZero() && !m.now.Before(c.expires)
}

// live reports whether c authenticates now.
func (m *model) live(c *modelCred) bool {
	return c.state == credLive && !m.expired(c)
}

// authFailure is the AuthError reason the model expects for a dead token,
// "" for a live one.
func (m *model) authFailure(c *modelCred) string {
	switch {
	case c.state == credGone:
		return mcpruntime.AuthUnknown
	case c.state == credRevoked && c.revokedExpired:
		return mcpruntime.AuthExpired
	case c.state == credRevoked:
		return mcpruntime.AuthRevoked
	case m.expired(c):
		return mcpruntime.AuthExpired
	}
	return ""
}

// principal is what Authenticate should return for c while it is live;
// the machine also posts as it, live or not.
func (m *model) principal(c *modelCred) mcpruntime.Principal {
	p := mcpruntime.Principal{
		Kind:         c.kind,
		CredentialID: c.id,
		Capabilities: slices.Clone(c.caps),
		Expires:      c.expires,
	}
	if c.kind == kindProvider {
		p.Namespace = "cred:" + c.id
		p.Thread, p.Instance = c.thread, c.instance
	} else {
		p.Namespace = "client:" + c.client
		p.Client, p.Access, p.Audience = c.client, c.access, c.audience
	}
	return p
}

// revoke marks c revoked now, if it is not already.
func (m *model) revoke(c *modelCred) {
	if c.state != credLive {
		return
	}
	c.state = credRevoked
	c.revokedExpired = m.expired(c)
}

// pairCreds returns the provider credentials of (thread, instance) that
// were never revoked or removed, in mint order.
func (m *model) pairCreds(thread, instance string) []*modelCred {
	var out []*modelCred
	for _, c := range m.creds {
		if c.kind == kindProvider && c.thread == thread && c.instance == instance && c.state == credLive {
			out = append(out, c)
		}
	}
	return out
}

// livePair returns the live credential of (thread, instance), or nil.
func (m *model) livePair(thread, instance string) *modelCred {
	var live *modelCred
	for _, c := range m.pairCreds(thread, instance) {
		if m.live(c) {
			live = c
		}
	}
	return live
}

func (m *model) addCred(c *modelCred) {
	m.creds = append(m.creds, c)
	if c.id != "" {
		m.credByID[c.id] = c
	}
}

// mintProvider revokes (thread, instance)'s credentials and records a new
// one.
func (m *model) mintProvider(thread, instance, id, tok string) *modelCred {
	for _, old := range m.pairCreds(thread, instance) {
		m.revoke(old)
	}
	c := &modelCred{
		token: tok, id: id, kind: kindProvider, thread: thread, instance: instance,
		caps: slices.Clone(m.instances[instance].caps), state: credLive,
	}
	if m.window > 0 {
		c.expires = m.now.Add(m.window)
	}
	m.addCred(c)
	return c
}

// touchThread refreshes the liveness of thread's live credentials.
func (m *model) touchThread(thread string) {
	for _, c := range m.creds {
		if c.kind == kindProvider && c.thread == thread && m.live(c) && m.window > 0 {
			c.expires = m.now.Add(m.window)
		}
	}
}

// ---- provider sessions ----

// holders returns the open sessions of instance that hold credential id.
func (m *model) holders(instance, credID string) []*modelSession {
	var out []*modelSession
	for _, s := range m.sessions {
		if s.open && s.instance == instance && slices.Contains(s.creds, credID) {
			out = append(out, s)
		}
	}
	return out
}

// openMultiSession returns the open session of a multi-thread instance.
func (m *model) openMultiSession(instance string) *modelSession {
	for _, s := range m.sessions {
		if s.open && s.instance == instance {
			return s
		}
	}
	return nil
}

// detachThread unbinds thread from every open session.
func (m *model) detachThread(thread string) {
	for _, s := range m.sessions {
		if s.open && slices.Contains(s.threads, thread) {
			s.threads = slices.DeleteFunc(s.threads, func(t string) bool { return t == thread })
			s.active = m.now
		}
	}
}

// releaseIdle closes every open session idle for at least m.idle and
// returns their ids, sorted. A session's idleness counts from its last
// open, attach or detach, or the last turn of a thread it serves,
// whichever is later; a run of its instance on one of its threads defers
// it.
func (m *model) releaseIdle() []string {
	var idle []*modelSession
	for _, s := range m.sessions {
		if !s.open {
			continue
		}
		since, busy := s.active, false
		for _, id := range s.threads {
			t := m.threads[id]
			if t == nil {
				continue
			}
			if t.runID != "" && t.runInstance == s.instance {
				busy = true
			}
			if t.lastTurn.After(since) {
				since = t.lastTurn
			}
		}
		if !busy && m.now.Sub(since) >= m.idle {
			idle = append(idle, s)
		}
	}
	ids := make([]string, 0, len(idle))
	for _, s := range idle {
		m.closeSession(s)
		ids = append(ids, s.id)
	}
	sort.Strings(ids)
	return ids
}

func addOnce(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// ---- threads ----

// activeThread returns the thread, or the error a lifecycle change of it
// gets: ErrUnknownThread or ErrArchivedThread.
func (m *model) activeThread(id string) (*modelThread, error) {
	t := m.threads[id]
	if t == nil {
		return nil, mcpruntime.ErrUnknownThread
	}
	if t.archived {
		return nil, mcpruntime.ErrArchivedThread
	}
	return t, nil
}

func (m *model) checkInstance(id string) error {
	if _, ok := m.instances[id]; !ok {
		return mcpruntime.ErrUnknownInstance
	}
	return nil
}

// createThread: an unknown initial instance is refused before the id is
// looked at.
func (m *model) createThread(id, instance string) error {
	if instance != "" {
		if err := m.checkInstance(instance); err != nil {
			return err
		}
	}
	if m.threads[id] != nil {
		return mcpruntime.ErrThreadExists
	}
	m.threads[id] = &modelThread{id: id, instance: instance, created: m.now}
	return nil
}

// openOutcome is what the model expects of OpenProviderSession.
type openOutcome struct {
	err error
	// reused: no credential is minted; session and cred name what is
	// returned.
	reused  bool
	session *modelSession
	cred    *modelCred
	// attach: a credential is minted and handed to session (an open
	// multi-thread session, or the pair's attached session whose credential
	// died) instead of a new one.
	attach bool
	// failed: a credential is minted, the driver fails to open the new
	// session, and the credential is revoked (errInjected).
	failed bool
}

// attachedSession returns the open session of instance that thread is
// attached to, the one with the smallest id if there are several.
func (m *model) attachedSession(thread, instance string) *modelSession {
	var out *modelSession
	for _, s := range m.sessions {
		if s.open && s.instance == instance && slices.Contains(s.threads, thread) && (out == nil || s.id < out.id) {
			out = s
		}
	}
	return out
}

// predictOpen says what OpenProviderSession(thread, instance) should do. It
// does not change the model; applyOpen does.
func (m *model) predictOpen(thread, instance string) openOutcome {
	if _, err := m.activeThread(thread); err != nil {
		return openOutcome{err: err}
	}
	if err := m.checkInstance(instance); err != nil {
		return openOutcome{err: err}
	}
	live := m.livePair(thread, instance)
	if live == nil {
		// The pair's session is still attached but its credential is dead:
		// it is re-bound to a new credential rather than a second session
		// started.
		if s := m.attachedSession(thread, instance); s != nil {
			return openOutcome{attach: true, session: s}
		}
	}
	if live != nil {
		hs := m.holders(instance, live.id)
		if len(hs) > 1 {
			panic(fmt.Sprintf("model: credential %s held by %d open sessions", live.id, len(hs)))
		}
		if len(hs) == 1 {
			h := hs[0]
			if slices.Contains(h.threads, thread) {
				return openOutcome{reused: true, session: h, cred: live}
			}
			if m.instances[instance].multi || len(h.threads) == 0 {
				return openOutcome{reused: true, session: h, cred: live}
			}
		}
	}
	if m.instances[instance].multi {
		if s := m.openMultiSession(instance); s != nil {
			return openOutcome{attach: true, session: s}
		}
	}
	if m.failNext[instance] {
		// The driver's error reaches the caller as the text of an
		// ErrProviderOpenFailed (actors' replies are plain data).
		return openOutcome{err: mcpruntime.ErrProviderOpenFailed, failed: true}
	}
	return openOutcome{}
}

// applyOpenFailure records an open whose driver failed: the credential it
// minted was revoked and is never seen (SPEC §3 "open fails: revoke the
// credential only if this open minted it"); the pair's old credential is
// untouched, no session exists, and the thread's current instance is not
// chosen by it ("set ... by the first provider session opened on it").
func (m *model) applyOpenFailure(instance string) {
	delete(m.failNext, instance)
}

// applyOpen records a successful open that the runtime answered with
// sessionID, credID and tok ("" when reused).
func (m *model) applyOpen(thread, instance string, out openOutcome, sessionID, credID, tok string) {
	if out.reused {
		if !slices.Contains(out.session.threads, thread) {
			out.session.threads = append(out.session.threads, thread) // re-attached
			out.session.active = m.now
		}
		return
	}
	m.mintProvider(thread, instance, credID, tok)
	if t := m.threads[thread]; t.instance == "" {
		t.instance = instance
	}
	if out.attach {
		out.session.threads = addOnce(out.session.threads, thread)
		out.session.creds = addOnce(out.session.creds, credID)
		out.session.active = m.now
		return
	}
	s := &modelSession{id: sessionID, instance: instance, open: true, threads: []string{thread}, creds: []string{credID}, active: m.now}
	m.sessions = append(m.sessions, s)
	m.sessByID[sessionID] = s
}

// closeSession closes an open session and releases what it recorded: each
// of its credentials that no other open session holds is revoked.
func (m *model) closeSession(s *modelSession) {
	s.open = false
	for _, id := range s.creds {
		c := m.credByID[id]
		if c == nil || c.kind != kindProvider || c.state != credLive {
			continue
		}
		if len(m.holders(c.instance, c.id)) > 0 {
			continue // another open session still holds it
		}
		m.revoke(c)
	}
	s.threads = nil
}

// release: ReleaseProviderSession(id).
func (m *model) release(id string) error {
	s := m.sessByID[id]
	if s == nil || !s.open {
		return mcpruntime.ErrUnknownProviderSession
	}
	m.closeSession(s)
	return nil
}

// kill: the driver reports the session dead. Nothing happens to a session
// that is already closed.
func (m *model) kill(id string) {
	if s := m.sessByID[id]; s != nil && s.open {
		m.closeSession(s)
	}
}

// switchProvider returns the expected previous instance and ended run.
func (m *model) switchProvider(thread, instance string) (prev, ended string, err error) {
	t, err := m.activeThread(thread)
	if err != nil {
		return "", "", err
	}
	if err := m.checkInstance(instance); err != nil {
		return "", "", err
	}
	prev = t.instance
	if t.runID != "" && t.runInstance != instance {
		ended = t.runID
		t.runID, t.runInstance, t.runStarted = "", "", time.Time{}
		t.lastTurn = m.now
	}
	t.instance = instance
	return prev, ended, nil
}

// predictRotate returns the error Rotate(thread, instance) should get.
func (m *model) predictRotate(thread, instance string) error {
	if _, err := m.activeThread(thread); err != nil {
		return err
	}
	return m.checkInstance(instance)
}

// applyRotate records a rotation that minted credID/tok: the pair's old
// credentials are revoked, and each open session of the instance that
// serves the thread with an old one is re-bound to the new one.
func (m *model) applyRotate(thread, instance, credID, tok string) {
	olds := m.pairCreds(thread, instance)
	m.mintProvider(thread, instance, credID, tok)
	for _, old := range olds {
		for _, s := range m.holders(instance, old.id) {
			if !slices.Contains(s.threads, thread) {
				continue
			}
			s.creds = slices.DeleteFunc(s.creds, func(id string) bool { return id == old.id })
			s.creds = addOnce(s.creds, credID)
			s.active = m.now // re-bound: an attach
		}
	}
}

// predictStartRun returns the error StartRun(thread, instance) should get.
func (m *model) predictStartRun(thread, instance string) error {
	t, err := m.activeThread(thread)
	if err != nil {
		return err
	}
	if t.instance != instance {
		return mcpruntime.ErrNotCurrentInstance
	}
	if t.runID != "" {
		return mcpruntime.ErrRunActive
	}
	return nil
}

// applyStartRun records run runID and the turn start's liveness refresh.
func (m *model) applyStartRun(thread, instance, runID string) {
	t := m.threads[thread]
	t.runID, t.runInstance, t.runStarted = runID, instance, m.now
	t.lastTurn = m.now
	m.runs = append(m.runs, runID)
	m.touchThread(thread)
}

// endRun: EndRun(thread, runID); "" ends whichever run is active.
func (m *model) endRun(thread, runID string) error {
	t, err := m.activeThread(thread)
	if err != nil {
		return err
	}
	if t.runID == "" || (runID != "" && runID != t.runID) {
		return mcpruntime.ErrNoRun
	}
	t.runID, t.runInstance, t.runStarted = "", "", time.Time{}
	t.lastTurn = m.now
	return nil
}

// predictStartTurn says what StartTurn(thread, instance, input) should
// do (SPEC §3.7): the error, and whether a run starts first (it stays as
// the agent's turn, or is ended at once when the instance's sessions take
// no prompts). It does not change the model.
func (m *model) predictStartTurn(thread, instance, input string) (err error, starts bool) {
	if input == "" {
		return mcpruntime.ErrInvalidArgument, false
	}
	if m.attachedSession(thread, instance) == nil {
		if m.threads[thread] == nil {
			return mcpruntime.ErrUnknownThread, false
		}
		return mcpruntime.ErrNoProviderSession, false
	}
	if err := m.predictStartRun(thread, instance); err != nil {
		return err, false
	}
	if !m.instances[instance].turns {
		return mcpruntime.ErrTurnsUnsupported, true
	}
	return nil, true
}

// applyRefusedTurn records a turn the agent never had: its run started
// (the turn start's liveness refresh) and ended at once.
func (m *model) applyRefusedTurn(thread string) {
	m.touchThread(thread)
	m.threads[thread].lastTurn = m.now
}

// touch: Touch(thread).
func (m *model) touch(thread string) error {
	t, err := m.activeThread(thread)
	if err != nil {
		return err
	}
	m.touchThread(thread)
	t.lastTurn = m.now
	return nil
}

// detach: Detach(thread); an archived thread can be detached (a no-op).
func (m *model) detach(thread string) error {
	if m.threads[thread] == nil {
		return mcpruntime.ErrUnknownThread
	}
	m.detachThread(thread)
	return nil
}

// archive: Archive(thread); archiving twice is not an error.
func (m *model) archive(thread string) error {
	t := m.threads[thread]
	if t == nil {
		return mcpruntime.ErrUnknownThread
	}
	for _, c := range m.creds {
		if c.kind == kindProvider && c.thread == thread {
			m.revoke(c)
		}
	}
	t.archived = true
	t.runID, t.runInstance, t.runStarted = "", "", time.Time{}
	m.detachThread(thread)
	return nil
}

// deleteThread: DeleteThread(thread); its credential rows go away.
func (m *model) deleteThread(thread string) error {
	if m.threads[thread] == nil {
		return mcpruntime.ErrUnknownThread
	}
	for _, c := range m.creds {
		if c.kind == kindProvider && c.thread == thread {
			c.state = credGone
		}
	}
	delete(m.threads, thread)
	m.detachThread(thread)
	return nil
}

// ---- client grants ----

func (m *model) predictIssueClient(access string) error {
	if access != readOnly && access != readWrite {
		return mcpruntime.ErrInvalidArgument
	}
	return nil
}

func (m *model) clientToken(cl *modelClient, tok, credID string) *modelCred {
	c := &modelCred{token: tok, id: credID, kind: kindClient, client: cl.id, access: cl.access, state: credLive}
	if m.clientTTL > 0 {
		c.expires = m.now.Add(m.clientTTL)
	}
	m.addCred(c)
	return c
}

func (m *model) applyIssueClient(id, access, tok, credID string) {
	cl := &modelClient{id: id, access: access}
	m.clients = append(m.clients, cl)
	m.clientByID[id] = cl
	m.clientToken(cl, tok, credID)
}

func (m *model) predictRefreshClient(id string) error {
	if cl := m.clientByID[id]; cl == nil || cl.revoked {
		return mcpruntime.ErrUnknownClient
	}
	return nil
}

// applyRefreshClient: the grant's expired tokens are marked so; its live
// ones are revoked if revokePrevious.
func (m *model) applyRefreshClient(id string, revokePrevious bool, tok, credID string) {
	cl := m.clientByID[id]
	for _, c := range m.creds {
		if c.kind == kindClient && c.client == id && c.state == credLive && (revokePrevious || m.expired(c)) {
			m.revoke(c)
		}
	}
	if revokePrevious {
		cl.revokeRefresh()
	}
	m.clientToken(cl, tok, credID)
}

// revokeClient: RevokeClient(id) removes every token row of the grant.
func (m *model) revokeClient(id string) error {
	cl := m.clientByID[id]
	if cl == nil || cl.revoked {
		return mcpruntime.ErrUnknownClient
	}
	cl.revoked = true
	for _, c := range m.creds {
		if c.kind == kindClient && c.client == id {
			c.state = credGone
		}
	}
	return nil
}

// ---- mutations ----

// post: Post(principal of caller, target, text). It returns the error, or
// the stored message.
func (m *model) post(caller *modelCred, target, text string) (modelMessage, error) {
	if target == "" {
		if caller.kind != kindProvider {
			return modelMessage{}, mcpruntime.ErrCredentialRequired
		}
		target = caller.thread
	}
	t, err := m.activeThread(target)
	if err != nil {
		return modelMessage{}, err
	}
	if !m.mayMutate(caller) {
		if m.live(caller) && caller.kind == kindClient {
			return modelMessage{}, mcpruntime.ErrReadOnly
		}
		return modelMessage{}, mcpruntime.ErrNotLive
	}
	if text == "" {
		return modelMessage{}, mcpruntime.ErrInvalidArgument
	}
	msg := modelMessage{seq: t.nextSeq, text: text, author: m.principal(caller).Namespace, instance: caller.instance, at: m.now}
	t.nextSeq++
	t.messages = append(t.messages, msg)
	return msg, nil
}

// mayMutate reports whether c is a live caller (SPEC §4): a live provider
// credential whose own thread is active with a run of its instance, or a
// live read-write client token.
func (m *model) mayMutate(c *modelCred) bool {
	if !m.live(c) {
		return false
	}
	if c.kind == kindClient {
		return c.access == readWrite
	}
	own := m.threads[c.thread]
	return own != nil && !own.archived && own.runID != "" && own.runInstance == c.instance
}

// ---- views ----

// thread is the snapshot Thread(id) should return.
func (m *model) thread(id string) mcpruntime.Thread {
	t := m.threads[id]
	out := mcpruntime.Thread{ID: t.id, Status: "active", Instance: t.instance, Created: t.created}
	if t.archived {
		out.Status = "archived"
	}
	if t.runID != "" {
		out.Run = &mcpruntime.Run{ID: t.runID, Instance: t.runInstance, Started: t.runStarted}
	}
	out.Messages = make([]mcpruntime.Message, len(t.messages))
	for i, msg := range t.messages {
		out.Messages[i] = msg.public()
	}
	return out
}

func (msg modelMessage) public() mcpruntime.Message {
	return mcpruntime.Message{Seq: msg.seq, Text: msg.text, Author: msg.author, Instance: msg.instance, At: msg.at}
}

// threadIDs returns the existing threads' ids, sorted.
func (m *model) threadIDs() []string {
	ids := make([]string, 0, len(m.threads))
	for id := range m.threads {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
