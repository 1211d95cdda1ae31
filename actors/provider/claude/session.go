package claude

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Bounds of the session's own waits.
const (
	// readerWait bounds how long Claude Code's stdout may stay open after
	// the process was reaped (a child that left the group holding it);
	// then the driver closes its end.
	readerWait = 2 * time.Second
	// statusPoll is how often the driver asks mcp_status again while
	// Claude Code reports the runtime's server pending.
	statusPoll = 100 * time.Millisecond
)

// session is one thread's Claude Code: one process, for the session's
// life, and the one conversation it holds.
type session struct {
	d        *claudeDriver
	id       string
	thread   string // the runtime's thread
	endpoint string
	dir      string // private (0700): mcp.json and HOME
	home     string // HOME, under dir; CLAUDE_CONFIG_DIR and the XDG directories under it
	mcpPath  string // the --mcp-config file, under dir
	apiKey   string
	events   driver.Events
	logger   *slog.Logger

	// ops serializes the session's calls. The runtime does already; this
	// keeps a rotation whole whatever a caller does.
	ops sync.Mutex

	proc *agentproc.Proc // set by open, before any other goroutine reads it
	conn *conn
	gone chan struct{} // closed once the process is reaped and its stdout read to the end

	mu         sync.Mutex // guards the fields below
	turn       *turnState // the turn in progress, or nil
	lastStatus string     // the MCP state last reported with Events.Status
	opened     bool       // Open returned the session: an exit is a death
	retired    bool       // stopped on purpose (close, failed open): its exit is no death
	closed     bool       // Close was called
	dead       bool       // Died was reported
}

// turnState is the turn in progress.
type turnState struct {
	id          string // the runtime's (driver.Turn.ID)
	uuid        string // the prompt's uuid, Claude Code's name of it in an interrupt's answer
	done        chan struct{}
	started     bool              // turn_started was reported
	interrupted bool              // the driver sent interrupt: the end is an interruption
	tools       map[string]string // tool_use id → tool name, for the results
}

// environ is Claude Code's environment: the host's part (agentproc), then
// the driver's, which wins.
func (s *session) environ() ([]string, []string) {
	cfg := &s.d.cfg
	own := []string{
		"HOME=" + s.home,
		EnvConfigDir + "=" + filepath.Join(s.home, ".claude"),
		"XDG_CONFIG_HOME=" + filepath.Join(s.home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(s.home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(s.home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(s.home, ".local", "state"),
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
	}
	if cfg.ScrubSubprocessEnv {
		own = append(own, "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1")
	}
	var redact []string
	if cfg.BaseURL != "" {
		own = append(own, EnvBaseURL+"="+cfg.BaseURL)
	}
	if s.apiKey != "" {
		own = append(own, EnvAPIKey+"="+s.apiKey)
		redact = append(redact, s.apiKey)
	}
	return cfg.Environ(own...), redact
}

// open writes the MCP configuration, starts Claude Code, initializes the
// stream-json session and waits until the runtime's server is connected
// with its tools listed.
func (s *session) open(ctx context.Context, authorization string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.d.cfg.StartTimeout))
	defer cancel()
	start := time.Now()
	cfgJSON, err := mcpConfigJSON(s.d.cfg.ServerName, s.endpoint, authorization)
	if err != nil {
		return err
	}
	if err := agentproc.WriteFile(s.mcpPath, cfgJSON); err != nil {
		return err
	}
	env, redact := s.environ()
	redact = append(redact, agentproc.Secret(authorization))
	p, err := agentproc.Start(agentproc.Spec{
		Path: s.d.path, Args: claudeArgs(s.d.cfg, s.mcpPath), Dir: s.d.cfg.Dir,
		Env: env, Logger: s.logger, Stdio: true, Redact: redact,
	})
	if err != nil {
		return err
	}
	s.proc = p
	s.conn = newConn(p.Stdin, s.received, s.requested)
	go s.conn.read(p.Stdout)
	go s.watch()
	s.logger.Info("claude started", "pid", p.Pid(), "thread", s.thread)

	err = s.conn.control(ctx, subtypeOnly{Subtype: reqInitialize}, reqInitialize, nil)
	if err == nil {
		err = s.waitConnected(ctx, authorization)
	}
	if err == nil {
		s.mu.Lock()
		if s.dead || s.isGone() {
			err = errors.New("claude exited during the open")
		} else {
			s.opened = true
		}
		s.mu.Unlock()
	}
	if err != nil {
		s.abandon()
		return s.startError(err)
	}
	s.logger.Info("claude session open", "thread", s.thread, "pid", p.Pid(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (s *session) isGone() bool {
	select {
	case <-s.gone:
		return true
	default:
		return false
	}
}

// startError is err with Claude Code's exit and last stderr lines, if it
// exited.
func (s *session) startError(err error) error {
	if !s.isGone() {
		return err
	}
	if tail := s.proc.Tail(); tail != "" {
		return fmt.Errorf("%w (claude: %s; stderr: %s)", err, s.proc.Status(), tail)
	}
	return fmt.Errorf("%w (claude: %s)", err, s.proc.Status())
}

// waitConnected asks mcp_status until Claude Code reports the runtime's
// server connected with authorization, its tools listed, and fails with
// Claude Code's own words otherwise.
func (s *session) waitConnected(ctx context.Context, authorization string) error {
	name := s.d.cfg.ServerName
	for {
		var res mcpStatusResult
		if err := s.conn.control(ctx, subtypeOnly{Subtype: reqMCPStatus}, reqMCPStatus, &res); err != nil {
			return err
		}
		var st *mcpServerStatus
		for i := range res.MCPServers {
			if res.MCPServers[i].Name == name {
				st = &res.MCPServers[i]
			}
		}
		if st == nil {
			return fmt.Errorf("claude lists no MCP server %q", name)
		}
		held := st.Config != nil && st.Config.Headers["Authorization"] == authorization
		switch {
		case st.Status == mcpConnected && held && len(st.Tools) > 0:
			s.status(driver.Status{Thread: s.thread, State: driver.StatusConnected})
			return nil
		case st.Status == mcpConnected && held:
			err := fmt.Errorf("MCP server %q connected but listed no tools", name)
			s.status(driver.Status{Thread: s.thread, State: driver.StatusFailed, Detail: err.Error()})
			return err
		case st.Status == mcpFailed || st.Status == mcpNeedsAuth || st.Status == "disabled":
			if held || st.Config == nil {
				err := fmt.Errorf("MCP server %q %s: %s", name, st.Status, orUnknown(st.Error))
				s.status(serverStatus(s.thread, *st))
				return err
			}
		}
		// pending, or still the old configuration
		t := time.NewTimer(statusPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("MCP server %q still %s: %w", name, st.Status, ctx.Err())
		}
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "(no error text)"
	}
	return s
}

// status reports s if the state changed since the last report (Claude
// Code repeats its servers' states at every turn).
func (s *session) status(st driver.Status) {
	s.mu.Lock()
	same := s.lastStatus == st.State && st.Detail == ""
	s.lastStatus = st.State
	s.mu.Unlock()
	if !same {
		s.events.Status(st)
	}
}

// watch waits for Claude Code's end and reports a death, unless it was
// stopped on purpose.
func (s *session) watch() {
	p, c := s.proc, s.conn
	select {
	case <-p.Done():
	case <-c.done:
		// Its stdout ended (or broke) while it runs: it is of no use.
		s.mu.Lock()
		retired := s.retired || s.closed
		s.mu.Unlock()
		if !retired {
			s.logger.Warn("claude's stdout ended; stopping it", "pid", p.Pid())
		}
		_ = p.Stop(context.Background(), time.Duration(s.d.cfg.Grace))
	}
	<-p.Done()
	t := time.NewTimer(readerWait)
	select {
	case <-c.done:
	case <-t.C:
		s.logger.Warn("claude's stdout still open after its exit; closing it", "pid", p.Pid())
		p.Stdout.Close() // ends the reader
		<-c.done
	}
	t.Stop()

	s.mu.Lock()
	died := s.opened && !s.retired && !s.closed && !s.dead
	var t0 *turnState
	if died {
		s.dead = true
		t0, s.turn = s.turn, nil
	}
	s.mu.Unlock()
	s.logger.Info("claude exited", "pid", p.Pid(), "status", p.Status(), "died", died)
	close(s.gone)
	if !died {
		return
	}
	err := fmt.Errorf("claude exited: %s", p.Status())
	if tail := p.Tail(); tail != "" {
		err = fmt.Errorf("%w; stderr: %s", err, tail)
	}
	if t0 != nil {
		close(t0.done)
		s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: t0.id, Outcome: driver.TurnFailed, Error: err.Error()})
	}
	s.events.Died(err)
}

// abandon stops Claude Code after a failed open and waits until it is
// gone.
func (s *session) abandon() {
	s.mu.Lock()
	s.retired = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.CloseBudget())
	defer cancel()
	_ = s.proc.Stop(ctx, time.Duration(s.d.cfg.Grace))
	<-s.gone
}

// Attach re-binds the session's thread. A new credential (a rotation) is
// written to mcp.json and handed to the running Claude Code with
// mcp_set_servers; Attach returns once mcp_status shows the server
// connected with it. An empty Authorization is a re-attach of the token
// the agent holds.
func (s *session) Attach(ctx context.Context, b driver.Binding) error {
	if b.Thread != s.thread {
		return fmt.Errorf("claude: session %s serves thread %s, not %s", s.id, s.thread, b.Thread)
	}
	if b.Authorization == "" {
		return nil
	}
	if _, err := agentproc.Bearer(b.Authorization); err != nil {
		return fmt.Errorf("claude: rotate session %s: %w", s.id, err)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	gone := s.closed || s.dead
	s.mu.Unlock()
	if gone {
		return fmt.Errorf("claude: rotate session %s: claude has exited", s.id)
	}
	start := time.Now()
	if err := s.rotate(ctx, b.Authorization); err != nil {
		err = fmt.Errorf("claude: rotate session %s: %w", s.id, err)
		// Which token Claude Code holds is unknown now: the session is of
		// no use. Close stops it.
		s.mu.Lock()
		report := !s.dead && !s.closed
		s.dead = true
		t0 := s.turn
		s.turn = nil
		s.mu.Unlock()
		if report {
			if t0 != nil {
				close(t0.done)
				s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: t0.id, Outcome: driver.TurnFailed, Error: err.Error()})
			}
			s.events.Died(err)
		}
		return err
	}
	s.logger.Info("claude session rotated", "thread", s.thread, "pid", s.proc.Pid(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (s *session) rotate(ctx context.Context, authorization string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.d.cfg.StartTimeout))
	defer cancel()
	s.proc.Redact(agentproc.Secret(authorization))
	cfgJSON, err := mcpConfigJSON(s.d.cfg.ServerName, s.endpoint, authorization)
	if err != nil {
		return err
	}
	// The file first: it is what a restarted Claude Code would read.
	if err := agentproc.WriteFile(s.mcpPath, cfgJSON); err != nil {
		return err
	}
	var res setServersResult
	if err := s.conn.control(ctx, setServersRequest{
		Subtype: reqMCPSetServers,
		Servers: map[string]mcpServerConfig{s.d.cfg.ServerName: serverConfig(s.endpoint, authorization)},
	}, reqMCPSetServers, &res); err != nil {
		return err
	}
	if e, ok := res.Errors[s.d.cfg.ServerName]; ok {
		s.status(serverStatus(s.thread, mcpServerStatus{Name: s.d.cfg.ServerName, Status: mcpFailed, Error: e}))
		return fmt.Errorf("mcp_set_servers: claude refused the server: %s", e)
	}
	return s.waitConnected(ctx, authorization)
}

// Detach keeps Claude Code: a handoff, the thread may come back.
func (s *session) Detach(ctx context.Context, thread string) error { return nil }

// Close ends Claude Code (stdin closed, SIGTERM, SIGKILL after the grace)
// and removes the session's directory.
func (s *session) Close(ctx context.Context) error {
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	s.closed = true
	t := s.turn
	s.turn = nil
	s.mu.Unlock()
	_ = s.proc.Stop(ctx, time.Duration(s.d.cfg.Grace)) // a SIGKILL is logged
	<-s.gone
	if t != nil {
		close(t.done)
		s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: t.id, Outcome: driver.TurnInterrupted, Error: "the session was closed"})
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("claude: close %s: %w", s.id, err)
	}
	return nil
}

// StartTurn sends t.Input to Claude Code as a user message and returns
// once it is written: stream-json has no acknowledgement, and Claude Code
// reads its stdin in order.
func (s *session) StartTurn(ctx context.Context, t driver.Turn) error {
	if t.Thread != s.thread {
		return fmt.Errorf("claude: session %s serves thread %s, not %s", s.id, s.thread, t.Thread)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("claude: start turn %s: %w", t.ID, err)
	}
	s.mu.Lock()
	switch {
	case s.closed || s.dead:
		s.mu.Unlock()
		return fmt.Errorf("claude: start turn %s: claude has exited", t.ID)
	case s.turn != nil:
		busy := s.turn.id
		s.mu.Unlock()
		return fmt.Errorf("claude: start turn %s: turn %s is still running", t.ID, busy)
	}
	ts := &turnState{id: t.ID, uuid: newUUID(), done: make(chan struct{}), tools: map[string]string{}}
	s.turn = ts
	s.mu.Unlock()

	var m userMessage
	m.Type, m.UUID = typeUser, ts.uuid
	m.Message.Role = "user"
	m.Message.Content = []textContent{{Type: "text", Text: t.Input}}
	if err := s.conn.write(m); err != nil {
		s.mu.Lock()
		if s.turn == ts {
			s.turn = nil
			close(ts.done)
		}
		s.mu.Unlock()
		return fmt.Errorf("claude: start turn %s: %w", t.ID, err)
	}
	return nil
}

// Interrupt asks Claude Code to stop the turn and returns once it
// answered; the end is reported when its result comes (interrupted). A
// turn that is not running is left alone.
func (s *session) Interrupt(ctx context.Context, thread, turn string) error {
	if thread != s.thread {
		return fmt.Errorf("claude: session %s serves thread %s, not %s", s.id, s.thread, thread)
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	ts := s.turn
	if ts == nil || ts.id != turn {
		s.mu.Unlock()
		return nil
	}
	ts.interrupted = true
	s.mu.Unlock()
	var res interruptResult
	if err := s.conn.control(ctx, interruptRequest{Subtype: reqInterrupt, CancelQueued: true}, reqInterrupt, &res); err != nil {
		return fmt.Errorf("claude: interrupt turn %s: %w", turn, err)
	}
	s.logger.Debug("claude interrupt answered", "turn", turn, "cancelled", string(res.Cancelled), "stillQueued", string(res.StillQueued))
	if bytes.Contains(res.Cancelled, []byte(ts.uuid)) {
		// Cancelled before it began: no result of it will come.
		s.endTurn(ts, driver.TurnInterrupted, "")
	}
	return nil
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
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
	s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: t.id, Outcome: outcome, Error: errText})
}

// currentTurn is the turn in progress, or nil.
func (s *session) currentTurn() *turnState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// requested answers a control request of Claude Code's. Nobody is there
// to approve: a permission request (can_use_tool, sent only if a host's
// flags ask for one) is denied, anything else refused.
func (s *session) requested(subtype string, _ json.RawMessage) (any, string) {
	s.logger.Info("claude asked the driver; declined", "subtype", subtype)
	if subtype == reqCanUseTool {
		return permissionDeny{Behavior: "deny", Message: "no one is there to approve this tool call (mcpruntime)"}, ""
	}
	return nil, "the mcpruntime claude driver does not answer " + subtype
}
