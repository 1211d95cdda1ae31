package codex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Bounds of the session's own waits.
const (
	// restartReserve is the part of a rotation's context kept for the
	// restart: a running turn is waited for until that much is left.
	restartReserve = 10 * time.Second
	// interruptWait bounds the wait for a turn's end after turn/interrupt.
	interruptWait = 5 * time.Second
	// readerWait bounds how long the app-server's stdout may stay open
	// after the process was reaped (a child that left the group holding
	// it); then the driver closes its end.
	readerWait = 2 * time.Second
	// statusPoll is how often an open re-lists the MCP status while Codex
	// still reports the connection as starting.
	statusPoll = 250 * time.Millisecond
)

// session is one thread's Codex: an app-server process (replaced at each
// rotation) and the one Codex thread it runs the turns of.
type session struct {
	d        *codexDriver
	id       string
	thread   string // the runtime's thread
	endpoint string
	dir      string // private (0700): CODEX_HOME and nothing else
	home     string // CODEX_HOME, under dir
	apiKey   string
	events   driver.Events
	logger   *slog.Logger

	// ops serializes the session's calls. The runtime does already; this
	// keeps a rotation's restart whole whatever a caller does.
	ops sync.Mutex

	mu          sync.Mutex // guards the fields below, and agent.retired/exited
	agent       *agent     // the current app-server
	codexThread string     // the Codex thread id, from thread/start
	turn        *turnState // the turn in progress, or nil
	opened      bool       // Open returned the session: an exit is a death
	closed      bool       // Close was called
	dead        bool       // Died was reported
}

// agent is one app-server process and its connection.
type agent struct {
	proc    *agentproc.Proc
	conn    *conn
	startup chan struct{} // a token per MCP startup notification: wakes waitConnected
	gone    chan struct{} // closed once the process is reaped and its stdout read to the end

	// guarded by session.mu
	retired bool // stopped on purpose (rotation, close, failed open): its exit is no death
	exited  bool // reaped
}

// turnState is the turn in progress.
type turnState struct {
	id      string // the runtime's (driver.Turn.ID); "" for an orphan
	codexID string // Codex's turn id; "" until known
	done    chan struct{}
	// orphaned is when StartTurn gave up waiting for Codex's answer (its
	// context ended) after sending turn/start: Codex may run the turn
	// anyway, and a turn/start during it would steer it, so the slot
	// stays taken (its events reported outside any turn, its end not
	// reported) until Codex ends it, or orphanTTL passed with no word of
	// it from Codex.
	orphaned time.Time
}

// orphanTTL is how long an orphaned turn nobody heard of keeps the slot.
const orphanTTL = 30 * time.Second

// open starts the first app-server, the Codex thread, and waits until the
// thread's MCP connection is up with the tools listed.
func (s *session) open(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.d.cfg.StartTimeout))
	defer cancel()
	start := time.Now()
	a, err := s.spawn(ctx, token)
	if err != nil {
		return err
	}
	var th threadResult
	err = a.conn.call(ctx, methodThreadStart, threadStartParams{Cwd: s.d.cfg.Dir}, &th)
	if err == nil && th.Thread.ID == "" {
		err = errors.New("thread/start: no thread id in the answer")
	}
	if err == nil {
		s.mu.Lock()
		s.codexThread = th.Thread.ID
		s.mu.Unlock()
		err = s.waitConnected(ctx, a)
	}
	if err == nil {
		s.mu.Lock()
		if a.exited {
			err = errors.New("codex app-server exited during the open")
		} else {
			s.opened = true
		}
		s.mu.Unlock()
	}
	if err != nil {
		s.abandon(a)
		return s.startError(a, err)
	}
	s.logger.Info("codex session open", "thread", s.thread, "codexThread", th.Thread.ID, "pid", a.proc.Pid(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// spawn starts an app-server with token and makes it the session's agent;
// it returns once the app-server answered initialize.
func (s *session) spawn(ctx context.Context, token string) (*agent, error) {
	cfg := &s.d.cfg
	own := []string{EnvCodexHome + "=" + s.home, EnvToken + "=" + token}
	redact := []string{token}
	if s.apiKey != "" {
		own = append(own, EnvAPIKey+"="+s.apiKey)
		redact = append(redact, s.apiKey)
	}
	p, err := agentproc.Start(agentproc.Spec{
		Path: s.d.path, Args: codexArgs(*cfg, s.endpoint), Dir: cfg.Dir,
		Env: cfg.Environ(own...), Logger: s.logger, Stdio: true, Redact: redact,
	})
	if err != nil {
		return nil, err
	}
	a := &agent{proc: p, startup: make(chan struct{}, 1), gone: make(chan struct{})}
	a.conn = newConn(p.Stdin,
		func(method string, params json.RawMessage) { s.notified(a, method, params) },
		func(method string, params json.RawMessage) (any, *rpcError) { return s.requested(method, params) })
	s.mu.Lock()
	s.agent = a
	s.mu.Unlock()
	go a.conn.read(p.Stdout)
	go s.watch(a)
	s.logger.Info("codex app-server started", "pid", p.Pid(), "thread", s.thread)

	err = a.conn.call(ctx, methodInitialize, initializeParams{
		ClientInfo: clientInfo{Name: "mcpruntime", Version: "1"},
	}, nil)
	if err == nil {
		err = a.conn.notify(methodInitializedNtf, nil)
	}
	if err != nil {
		s.abandon(a)
		return nil, s.startError(a, err)
	}
	return a, nil
}

// startError is err with the app-server's exit and last stderr lines, if
// it exited.
func (s *session) startError(a *agent, err error) error {
	select {
	case <-a.gone:
		if tail := a.proc.Tail(); tail != "" {
			return fmt.Errorf("%w (codex app-server: %s; stderr: %s)", err, a.proc.Status(), tail)
		}
		return fmt.Errorf("%w (codex app-server: %s)", err, a.proc.Status())
	default:
		return err
	}
}

// waitConnected lists the MCP status of the Codex thread until Codex
// reports the runtime's server connected with its tools listed, and fails
// with Codex's own error text otherwise.
func (s *session) waitConnected(ctx context.Context, a *agent) error {
	name := s.d.cfg.ServerName
	s.mu.Lock()
	thread := s.codexThread
	s.mu.Unlock()
	for {
		var res mcpStatusListResult
		if err := a.conn.call(ctx, methodMCPStatusList, mcpStatusListParams{
			ThreadID: thread, ServerName: name, Detail: "toolsAndAuthOnly",
		}, &res); err != nil {
			return err
		}
		var st *mcpServerStatus
		for i := range res.Data {
			if res.Data[i].Name == name {
				st = &res.Data[i]
			}
		}
		if st == nil {
			return fmt.Errorf("codex lists no MCP server %q", name)
		}
		rs := ""
		if st.RuntimeStatus != nil {
			rs = *st.RuntimeStatus
		}
		// A failure is reported here too: Codex's startup notification of
		// it may come after its answer, or not before the process is stopped.
		failed := func(err error) error {
			state := driver.StatusFailed
			if rs == runtimeAuthRequired {
				state = driver.StatusNeedsAuth
			}
			s.events.Status(driver.Status{Thread: s.thread, State: state, Detail: bound(err.Error())})
			return err
		}
		switch {
		case st.ToolsError != nil:
			return failed(fmt.Errorf("MCP server %q %s: %s", name, orUnknown(rs), *st.ToolsError))
		case rs == runtimeConnected && len(st.Tools) == 0:
			return failed(fmt.Errorf("MCP server %q connected but listed no tools", name))
		case rs == runtimeConnected:
			return nil
		case rs == runtimeStarting || rs == runtimeNotStarted || rs == "":
			t := time.NewTimer(statusPoll)
			select {
			case <-a.startup:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("MCP server %q still %s: %w", name, orUnknown(rs), ctx.Err())
			}
			t.Stop()
		default:
			return failed(fmt.Errorf("MCP server %q: %s", name, rs))
		}
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "(no status)"
	}
	return s
}

// watch waits for the app-server's end and reports a death, unless it was
// stopped on purpose.
func (s *session) watch(a *agent) {
	select {
	case <-a.proc.Done():
	case <-a.conn.done:
		// Its stdout ended (or broke) while it runs: it is of no use.
		// Stopped like any other, with the grace.
		s.mu.Lock()
		retired := a.retired
		s.mu.Unlock()
		if !retired {
			s.logger.Warn("codex app-server stdout ended; stopping it", "pid", a.proc.Pid())
		}
		_ = a.proc.Stop(context.Background(), time.Duration(s.d.cfg.Grace))
	}
	<-a.proc.Done()
	t := time.NewTimer(readerWait)
	select {
	case <-a.conn.done:
	case <-t.C:
		s.logger.Warn("codex app-server's stdout still open after its exit; closing it", "pid", a.proc.Pid())
		a.proc.Stdout.Close() // ends the reader
		<-a.conn.done
	}
	t.Stop()

	s.mu.Lock()
	a.exited = true
	died := s.opened && !a.retired && s.agent == a && !s.closed && !s.dead
	var t0 *turnState
	if died {
		s.dead = true
		t0, s.turn = s.turn, nil
	}
	s.mu.Unlock()
	s.logger.Info("codex app-server exited", "pid", a.proc.Pid(), "status", a.proc.Status(), "died", died)
	close(a.gone)
	if !died {
		return
	}
	err := fmt.Errorf("codex app-server exited: %s", a.proc.Status())
	if tail := a.proc.Tail(); tail != "" {
		err = fmt.Errorf("%w; stderr: %s", err, tail)
	}
	if t0 != nil {
		close(t0.done)
	}
	if t0 != nil && t0.id != "" {
		s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: t0.id, Outcome: driver.TurnFailed, Error: err.Error()})
	}
	s.events.Died(err)
}

// abandon stops an app-server that is not (or no longer) wanted and waits
// until it is gone.
func (s *session) abandon(a *agent) {
	s.mu.Lock()
	a.retired = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.CloseBudget())
	defer cancel()
	_ = a.proc.Stop(ctx, time.Duration(s.d.cfg.Grace))
	<-a.gone
}

// Attach re-binds the session's thread. A new credential (a rotation)
// restarts the app-server with it and resumes the Codex thread there; an
// empty Authorization is a re-attach of the token the agent holds.
func (s *session) Attach(ctx context.Context, b driver.Binding) error {
	if b.Thread != s.thread {
		return fmt.Errorf("codex: session %s serves thread %s, not %s", s.id, s.thread, b.Thread)
	}
	if b.Authorization == "" {
		return nil
	}
	token, err := agentproc.Bearer(b.Authorization)
	if err != nil {
		return fmt.Errorf("codex: rotate session %s: %w", s.id, err)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	old, t := s.agent, s.turn
	gone := s.closed || s.dead
	s.mu.Unlock()
	if gone {
		return fmt.Errorf("codex: rotate session %s: the app-server has exited", s.id)
	}
	start := time.Now()
	if t != nil {
		s.settleTurn(ctx, old, t)
	}
	s.abandon(old)
	if t != nil {
		s.endTurn(t, driver.TurnInterrupted, "interrupted by a credential rotation")
	}

	err = s.restart(ctx, token)
	if err != nil {
		err = fmt.Errorf("codex: rotate session %s: %w", s.id, err)
		s.mu.Lock()
		report := !s.dead && !s.closed
		s.dead = true
		s.mu.Unlock()
		if report {
			s.events.Died(err)
		}
		return err
	}
	s.logger.Info("codex session rotated", "thread", s.thread, "pid", s.currentPid(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// restart starts an app-server with token and resumes the Codex thread in
// it, until its MCP connection is up.
func (s *session) restart(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.d.cfg.StartTimeout))
	defer cancel()
	a, err := s.spawn(ctx, token)
	if err != nil {
		return err
	}
	s.mu.Lock()
	thread := s.codexThread
	s.mu.Unlock()
	var th threadResult
	err = a.conn.call(ctx, methodThreadResume, threadResumeParams{ThreadID: thread, ExcludeTurns: true}, &th)
	if err == nil && th.Thread.ID != thread {
		err = fmt.Errorf("thread/resume %s resumed thread %q", thread, th.Thread.ID)
	}
	if err == nil {
		err = s.waitConnected(ctx, a)
	}
	if err == nil {
		s.mu.Lock()
		if a.exited {
			err = errors.New("codex app-server exited during the restart")
		}
		s.mu.Unlock()
	}
	if err != nil {
		s.abandon(a)
		return s.startError(a, err)
	}
	return nil
}

func (s *session) currentPid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agent == nil {
		return 0
	}
	return s.agent.proc.Pid()
}

// settleTurn gives a turn in progress until RotateWait (or until only
// restartReserve is left of ctx) to end, then interrupts it.
func (s *session) settleTurn(ctx context.Context, a *agent, t *turnState) {
	wait := time.Duration(s.d.cfg.RotateWait)
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-restartReserve)
	}
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-t.done:
			return
		case <-timer.C:
		case <-ctx.Done():
		}
	}
	s.logger.Info("rotation interrupts the turn in progress", "thread", s.thread, "turn", t.id)
	ictx, cancel := context.WithTimeout(context.Background(), interruptWait)
	defer cancel()
	s.mu.Lock()
	codexID, thread := t.codexID, s.codexThread
	s.mu.Unlock()
	if codexID != "" {
		if err := a.conn.call(ictx, methodTurnInterrupt, turnInterruptParams{ThreadID: thread, TurnID: codexID}, nil); err != nil {
			s.logger.Warn("interrupt the turn before a rotation", "turn", t.id, "err", err)
		}
	}
	select {
	case <-t.done:
	case <-ictx.Done():
	}
}

// Detach keeps the app-server: a handoff, the thread may come back.
func (s *session) Detach(ctx context.Context, thread string) error { return nil }

// Close ends the app-server (stdin closed, SIGTERM, SIGKILL after the
// grace) and removes the session's directory.
func (s *session) Close(ctx context.Context) error {
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	s.closed = true
	a := s.agent
	t := s.turn
	s.turn = nil
	s.mu.Unlock()
	if a != nil {
		s.mu.Lock()
		a.retired = true
		s.mu.Unlock()
		_ = a.proc.Stop(ctx, time.Duration(s.d.cfg.Grace)) // a SIGKILL is logged
		<-a.gone
	}
	if t != nil {
		close(t.done)
	}
	if t != nil && t.id != "" {
		s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: t.id, Outcome: driver.TurnInterrupted, Error: "the session was closed"})
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("codex: close %s: %w", s.id, err)
	}
	return nil
}

// StartTurn starts a Codex turn with t.Input on the session's Codex
// thread and returns once Codex accepted it.
func (s *session) StartTurn(ctx context.Context, t driver.Turn) error {
	if t.Thread != s.thread {
		return fmt.Errorf("codex: session %s serves thread %s, not %s", s.id, s.thread, t.Thread)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	switch {
	case s.closed || s.dead:
		s.mu.Unlock()
		return fmt.Errorf("codex: start turn %s: the app-server has exited", t.ID)
	case s.turn != nil && s.turn.id == "" && s.turn.codexID == "" && time.Since(s.turn.orphaned) > orphanTTL:
		s.logger.Warn("codex never started the turn whose start was given up; slot freed")
		close(s.turn.done)
		s.turn = nil
	case s.turn != nil && s.turn.id == "":
		s.mu.Unlock()
		return fmt.Errorf("codex: start turn %s: a turn whose start timed out may still be running", t.ID)
	case s.turn != nil:
		busy := s.turn.id
		s.mu.Unlock()
		return fmt.Errorf("codex: start turn %s: turn %s is still running", t.ID, busy)
	}
	ts := &turnState{id: t.ID, done: make(chan struct{})}
	s.turn = ts
	a, thread := s.agent, s.codexThread
	s.mu.Unlock()

	var res turnResult
	err := a.conn.call(ctx, methodTurnStart, turnStartParams{
		ThreadID: thread, Input: []userInput{{Type: "text", Text: t.Input, TextElements: []string{}}},
	}, &res)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		switch {
		case s.turn != ts:
		case errors.Is(err, errUnanswered):
			ts.id, ts.orphaned = "", time.Now() // sent; Codex may run it
		default:
			s.turn = nil
			close(ts.done)
		}
		return fmt.Errorf("codex: start turn %s: %w", t.ID, err)
	}
	if ts.codexID == "" {
		ts.codexID = res.Turn.ID
	}
	return nil
}

// Interrupt asks Codex to stop the turn; its end is reported when Codex
// says it ended (interrupted). A turn that is not running is left alone.
func (s *session) Interrupt(ctx context.Context, thread, turn string) error {
	if thread != s.thread {
		return fmt.Errorf("codex: session %s serves thread %s, not %s", s.id, s.thread, thread)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	ts, a, codexThread := s.turn, s.agent, s.codexThread
	s.mu.Unlock()
	if ts == nil || ts.id == "" || ts.id != turn || ts.codexID == "" {
		return nil
	}
	if err := a.conn.call(ctx, methodTurnInterrupt, turnInterruptParams{ThreadID: codexThread, TurnID: ts.codexID}, nil); err != nil {
		return fmt.Errorf("codex: interrupt turn %s: %w", turn, err)
	}
	return nil
}

// endTurn reports the end of t, once.
func (s *session) endTurn(t *turnState, outcome, errText string) {
	s.mu.Lock()
	if s.turn != t {
		s.mu.Unlock()
		return
	}
	s.turn = nil
	s.mu.Unlock()
	close(t.done)
	if t.id != "" {
		s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: t.id, Outcome: outcome, Error: errText})
	}
}

// turnFor returns the turn in progress if codexID is its Codex id (or its
// id is not known yet: the first notification of a turn can come before
// turn/start's answer).
func (s *session) turnFor(codexID string) *turnState {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.turn
	if t == nil || codexID == "" {
		return nil
	}
	if t.codexID == "" {
		t.codexID = codexID
	}
	if t.codexID != codexID {
		return nil
	}
	return t
}
