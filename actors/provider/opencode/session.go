package opencode

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// statusInterval is how often the driver asks the server for the state of
// its MCP connection (GET /mcp): OpenCode publishes no event for it.
const statusInterval = 2 * time.Second

// session is one OpenCode server serving one thread through one OpenCode
// session.
type session struct {
	id     string // the provider session
	thread string
	name   string // the MCP server's name in OpenCode
	cfg    Config
	dir    string // the private directory: HOME, XDG dirs, TMPDIR, opencode.json
	proc   *agentproc.Proc
	events driver.Events
	logger *slog.Logger
	api    *client
	oc     string // the OpenCode session's id; set before the loops start

	ctx    context.Context // ends the background loops
	cancel context.CancelFunc
	loops  sync.WaitGroup
	kick   chan struct{} // asks watchMCP for a check now
	// stdoutDone is closed when the server's stdout reached its end.
	stdoutDone chan struct{}
	closeOnce  sync.Once

	// regMu serializes the registrations of the MCP server (open, rotation,
	// re-registration) and guards the fields below.
	regMu    sync.Mutex
	endpoint string
	auth     string // the Authorization header the server is handed

	secretsMu sync.Mutex // guards secrets
	secrets   []string   // hidden from every error text and logged line

	// mu guards the fields below.
	mu      sync.Mutex
	opened  bool // Open returned it: from now on an exit is a death
	closing bool // Close was called: an exit is not a death
	exited  bool
	status  driver.Status // the last one reported
	turn    *turnState    // the turn in progress, nil if none
	idle    bool          // OpenCode's session was last reported idle
	// msgs holds the messages of the OpenCode session, by id, each with
	// the turn in progress when it first appeared: a message of an earlier
	// turn updated late (an aborted one) is not taken for this turn's.
	msgs map[string]message
	seen map[string]uint8 // part id → what was reported of it, within the turn
}

// message is what the driver keeps of an OpenCode message.
type message struct {
	role      string
	turn      *turnState // nil: it appeared outside a turn
	completed bool
}

// turnState is a turn sent to OpenCode and not yet ended. It ends at the
// first idle of the OpenCode session once it began, OpenCode answered it
// (an assistant message appeared during it) or failed or was interrupted,
// and none of its assistant messages is still open. An abort is followed
// by two idles, one before the aborted message is closed and one after,
// when OpenCode is ready for the next prompt: the first does not end the
// aborted turn (OpenCode would fail a prompt sent then), the second is not
// left over for the next turn.
type turnState struct {
	id          string
	started     bool // OpenCode's session went busy (or failed) with it
	answers     int  // assistant messages that appeared during it
	open        int  // those not yet completed
	interrupted bool // Interrupt asked for an abort
	aborted     bool // OpenCode reported the abort
	err         string
	ended       chan struct{} // closed by whoever takes it out of session.turn
}

// Bits of session.seen.
const (
	seenText uint8 = 1 << iota
	seenCall
	seenResult
)

func open(ctx context.Context, d *ocDriver, req driver.OpenRequest) (*session, error) {
	c := d.cfg
	b := req.Binding
	var apiKey string
	if c.APIKeyEnv != "" {
		v, ok := os.LookupEnv(c.APIKeyEnv)
		if !ok {
			return nil, fmt.Errorf("opencode: apiKeyEnv: %s is not set in the runtime's environment", c.APIKeyEnv)
		}
		apiKey = v
	}
	dir, err := agentproc.PrivateDir(c.ConfigDir, "opencode-")
	if err != nil {
		return nil, fmt.Errorf("opencode: %w", err)
	}
	sub := func(name string) string { return filepath.Join(dir, name) }
	for _, name := range []string{"home", "config", "data", "state", "cache", "tmp"} {
		if err := os.Mkdir(sub(name), 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("opencode: private directory: %w", err)
		}
	}
	data, err := fileConfig(c)
	if err == nil {
		err = agentproc.WriteFile(sub("opencode.json"), data)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("opencode: configuration file: %w", err)
	}
	password, err := randomSecret()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("opencode: server password: %w", err)
	}
	own := []string{
		"HOME=" + sub("home"),
		"TMPDIR=" + sub("tmp"),
		"XDG_CONFIG_HOME=" + sub("config"),
		"XDG_DATA_HOME=" + sub("data"),
		"XDG_STATE_HOME=" + sub("state"),
		"XDG_CACHE_HOME=" + sub("cache"),
		"OPENCODE_CONFIG=" + sub("opencode.json"),
		"OPENCODE_SERVER_USERNAME=" + Username,
		"OPENCODE_SERVER_PASSWORD=" + password,
	}
	for name, v := range DefaultEnv {
		if _, set := c.Env[name]; !set {
			own = append(own, name+"="+v)
		}
	}
	if apiKey != "" {
		own = append(own, EnvAPIKey+"="+apiKey)
	}

	logger := d.logger.With("session", req.SessionID)
	bg, cancel := context.WithCancel(context.Background())
	s := &session{
		id: req.SessionID, thread: b.Thread, name: serverName(c.ServerName, req.SessionID), cfg: c, dir: dir,
		events: req.Events, logger: logger, ctx: bg, cancel: cancel,
		kick: make(chan struct{}, 1), stdoutDone: make(chan struct{}),
		endpoint: b.Endpoint, auth: b.Authorization,
		msgs: map[string]message{}, seen: map[string]uint8{},
	}
	s.secrets = []string{agentproc.Secret(b.Authorization), password}
	if apiKey != "" {
		s.secrets = append(s.secrets, apiKey)
	}
	proc, err := agentproc.Start(agentproc.Spec{
		Path: d.path, Args: serveArgs(c), Dir: c.Dir, Env: c.Environ(own...),
		Logger: logger, Stdio: true, Redact: s.secrets,
	})
	if err != nil {
		cancel()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("opencode: %w", err)
	}
	s.proc = proc
	logger.Info("provider process started", "pid", proc.Pid(), "command", c.Command, "thread", b.Thread)
	listening := make(chan string, 1)
	s.loops.Add(2)
	go s.readStdout(listening)
	go s.wait()

	fail := func(err error) (*session, error) {
		select {
		case <-proc.Done():
			err = fmt.Errorf("%w (the server exited: %s%s)", err, proc.Status(), tailOf(proc))
		default:
		}
		stop, done := context.WithTimeout(context.Background(), c.CloseBudget())
		defer done()
		s.shutdown(stop)
		return nil, err
	}
	var base string
	select {
	case base = <-listening:
	case <-proc.Done():
		return fail(errors.New("opencode: the server exited at once"))
	case <-ctx.Done():
		return fail(fmt.Errorf("opencode: the server did not start listening: %w", ctx.Err()))
	}
	s.api = newClient(base, password, s.hide)
	var health struct {
		Healthy bool   `json:"healthy"`
		Version string `json:"version"`
	}
	if err := s.api.do(ctx, http.MethodGet, "/global/health", nil, &health); err != nil {
		return fail(err)
	}
	if err := s.loadModel(ctx); err != nil {
		return fail(err)
	}
	var info sessionInfo
	if err := s.api.do(ctx, http.MethodPost, "/session", sessionCreate{Title: "mcpruntime thread " + b.Thread, Permission: headless}, &info); err != nil {
		return fail(err)
	}
	if info.ID == "" {
		return fail(errors.New("opencode: POST /session: no session id in the answer"))
	}
	s.oc = info.ID // set once, before the loops that read it start
	connected := make(chan struct{})
	s.loops.Add(1)
	go s.eventLoop(connected)
	select {
	case <-connected:
	case <-proc.Done():
		return fail(errors.New("opencode: the server exited"))
	case <-ctx.Done():
		return fail(fmt.Errorf("opencode: GET /event: no stream: %w", ctx.Err()))
	}
	s.regMu.Lock()
	err = s.connect(ctx)
	s.regMu.Unlock()
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	exited := s.exited
	s.opened = !exited
	s.mu.Unlock()
	if exited {
		return fail(errors.New("opencode: the server exited"))
	}
	s.loops.Add(1)
	go s.watchMCP()
	logger.Info("opencode session ready", "url", base, "version", health.Version, "mcpServer", s.name, "opencodeSession", s.oc)
	return s, nil
}

// loadModel has OpenCode load its providers now (GET /config/providers)
// and checks that the configured model is among them. OpenCode loads them
// once, at the first use, and an abort that interrupts that first load
// (a turn interrupted in its first second) leaves every later prompt of
// the server failing with "All fibers interrupted without error".
func (s *session) loadModel(ctx context.Context) error {
	var res struct {
		Providers []struct {
			ID     string                     `json:"id"`
			Models map[string]json.RawMessage `json:"models"`
		} `json:"providers"`
	}
	if err := s.api.do(ctx, http.MethodGet, "/config/providers", nil, &res); err != nil {
		return err
	}
	m := s.cfg.model()
	if m == nil {
		return nil
	}
	for _, p := range res.Providers {
		if _, ok := p.Models[m.ModelID]; ok && p.ID == m.ProviderID {
			return nil
		}
	}
	return fmt.Errorf("opencode: model %s/%s: not among OpenCode's providers (GET /config/providers)", m.ProviderID, m.ModelID)
}

// serverName is the session's MCP server name in OpenCode: the configured
// prefix and a short hash of the session id, a name no repository's
// opencode.json uses (a project's configuration would shadow an entry of
// the same name).
func serverName(prefix, session string) string {
	h := sha256.Sum256([]byte(session))
	return prefix + "-" + hex.EncodeToString(h[:4])
}

func randomSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func tailOf(p *agentproc.Proc) string {
	if t := p.Tail(); t != "" {
		return ": " + t
	}
	return ""
}

// hide replaces the session's secrets in s.
func (s *session) hide(text string) string {
	s.secretsMu.Lock()
	defer s.secretsMu.Unlock()
	for _, sec := range s.secrets {
		if sec != "" {
			text = strings.ReplaceAll(text, sec, "[redacted]")
		}
	}
	return text
}

func (s *session) addSecret(sec string) {
	s.proc.Redact(sec)
	s.secretsMu.Lock()
	s.secrets = append(s.secrets, sec)
	s.secretsMu.Unlock()
}

// readStdout logs the server's stdout, a record per line, and hands the
// URL of its "opencode server listening on http://…" line to listening.
func (s *session) readStdout(listening chan<- string) {
	defer s.loops.Done()
	defer close(s.stdoutDone)
	sc := bufio.NewScanner(s.proc.Stdout)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	found := false
	for sc.Scan() {
		line := s.hide(sc.Text())
		s.logger.Info("provider output", "stream", "stdout", "line", line)
		if found {
			continue
		}
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			if u, err := url.Parse(strings.TrimSpace(rest)); err == nil && u.Scheme == "http" && u.Host != "" {
				found = true
				listening <- "http://" + u.Host
			}
		}
	}
}

// wait follows the server's exit: it ends the background loops and the
// turn in progress, and reports a death unless the session was closing.
func (s *session) wait() {
	defer s.loops.Done()
	<-s.proc.Done()
	select {
	case <-s.stdoutDone:
	case <-time.After(time.Second): // a stray holder of the pipe
	}
	s.proc.Stdout.Close()
	s.cancel()
	s.mu.Lock()
	s.exited = true
	died := s.opened && !s.closing
	ts := s.turn
	s.turn = nil
	s.mu.Unlock()
	cause := fmt.Sprintf("opencode exited: %s%s", s.proc.Status(), tailOf(s.proc))
	s.logger.Info("provider process exited", "pid", s.proc.Pid(), "status", s.proc.Status(), "died", died)
	if ts != nil {
		close(ts.ended)
		if died {
			s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: ts.id, Outcome: driver.TurnFailed, Error: cause})
		}
	}
	if died {
		if err := os.RemoveAll(s.dir); err != nil {
			s.logger.Warn("remove the private directory", "err", err)
		}
		s.events.Died(errors.New(cause))
	}
}

// shutdown stops the server and everything of the session; the
// private directory is removed.
func (s *session) shutdown(ctx context.Context) {
	s.cancel()
	if err := s.proc.Stop(ctx, time.Duration(s.cfg.Grace)); err != nil {
		s.logger.Warn("opencode did not stop on SIGTERM; killed", "pid", s.proc.Pid())
	}
	s.loops.Wait()
	if s.api != nil {
		s.api.close()
	}
	if err := os.RemoveAll(s.dir); err != nil {
		s.logger.Warn("remove the private directory", "err", err)
	}
}

// Attach re-binds the session's thread. A new credential (after a
// rotation) re-registers the MCP server with it, on the running server:
// Attach returns once OpenCode reports the new connection up.
func (s *session) Attach(ctx context.Context, b driver.Binding) error {
	if b.Thread != s.thread {
		return fmt.Errorf("opencode: session %s serves thread %s, not %s", s.id, s.thread, b.Thread)
	}
	if b.Authorization == "" {
		return nil
	}
	s.addSecret(agentproc.Secret(b.Authorization))
	s.regMu.Lock()
	defer s.regMu.Unlock()
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited {
		return fmt.Errorf("opencode: session %s: the server has exited", s.id)
	}
	s.auth = b.Authorization
	if b.Endpoint != "" {
		s.endpoint = b.Endpoint
	}
	return s.connect(ctx)
}

// Detach keeps the server: a handoff, the thread may come back.
func (s *session) Detach(ctx context.Context, thread string) error { return nil }

// Close stops the server (SIGTERM to its group, SIGKILL after the grace)
// and removes the private directory.
func (s *session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.shutdown(ctx)
	})
	return nil
}

// connect registers the MCP server with the current credential (POST /mcp,
// which connects it and lists its tools) and checks GET /mcp. It fails
// with OpenCode's own status and error text unless the server is
// connected. Call with regMu held.
func (s *session) connect(ctx context.Context) error {
	s.report(driver.Status{Thread: s.thread, State: driver.StatusPending})
	st, err := s.register(ctx)
	if err == nil && st.Status == "connected" {
		var all map[string]mcpStatus
		if err = s.api.do(ctx, http.MethodGet, "/mcp", nil, &all); err == nil {
			var ok bool
			if st, ok = all[s.name]; !ok {
				st = mcpStatus{Status: "failed", Error: "not in GET /mcp"}
			}
		}
	}
	if err != nil {
		s.report(driver.Status{Thread: s.thread, State: driver.StatusFailed, Detail: err.Error()})
		return err
	}
	status := statusOf(s.thread, st)
	s.report(status)
	if status.State != driver.StatusConnected {
		return fmt.Errorf("opencode: MCP server %s: %s", s.name, status.Detail)
	}
	return nil
}

// register is POST /mcp with the current endpoint and Authorization. Call
// with regMu held.
func (s *session) register(ctx context.Context) (mcpStatus, error) {
	var res map[string]mcpStatus
	err := s.api.do(ctx, http.MethodPost, "/mcp", mcpAdd{Name: s.name, Config: mcpRemoteCfg{
		Type: "remote", URL: s.endpoint, Headers: map[string]string{"Authorization": s.auth}, OAuth: false, Enabled: true,
	}}, &res)
	if err != nil {
		return mcpStatus{}, err
	}
	st, ok := res[s.name]
	if !ok {
		return mcpStatus{}, fmt.Errorf("opencode: POST /mcp: no status of %s in the answer", s.name)
	}
	return st, nil
}

// statusOf translates an OpenCode MCP status. OpenCode (with OAuth off)
// reports a refused credential as failed with the HTTP status in its
// error text.
func statusOf(thread string, st mcpStatus) driver.Status {
	detail := st.Status
	if st.Error != "" {
		detail += ": " + st.Error
	}
	out := driver.Status{Thread: thread, State: driver.StatusFailed, Detail: detail}
	switch st.Status {
	case "connected":
		out.State, out.Detail = driver.StatusConnected, ""
	case "needs_auth", "needs_client_registration":
		out.State = driver.StatusNeedsAuth
	case "failed":
		if strings.Contains(st.Error, "(401)") || strings.Contains(st.Error, "(403)") {
			out.State = driver.StatusNeedsAuth
		}
	}
	return out
}

// report reports a status if it differs from the last one.
func (s *session) report(st driver.Status) {
	s.mu.Lock()
	same := s.status == st
	s.status = st
	s.mu.Unlock()
	if !same {
		s.events.Status(st)
	}
}

// watchMCP polls GET /mcp and reports the connection's changes. An entry
// OpenCode dropped (its instance was reloaded) is registered again with
// the current credential.
func (s *session) watchMCP() {
	defer s.loops.Done()
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		s.checkMCP()
	}
}

func (s *session) checkMCP() {
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	s.regMu.Lock()
	defer s.regMu.Unlock()
	var all map[string]mcpStatus
	if err := s.api.do(ctx, http.MethodGet, "/mcp", nil, &all); err != nil {
		if s.ctx.Err() == nil {
			s.logger.Warn("opencode: MCP status", "err", err)
		}
		return
	}
	if _, ok := all[s.name]; !ok {
		s.logger.Warn("opencode dropped the MCP server; registering it again", "mcpServer", s.name)
		if err := s.connect(ctx); err != nil && s.ctx.Err() == nil {
			s.logger.Warn("opencode: register the MCP server again", "err", err)
		}
		if err := s.loadModel(ctx); err != nil && s.ctx.Err() == nil {
			s.logger.Warn("opencode: load the model again", "err", err)
		}
		return
	}
	s.report(statusOf(s.thread, all[s.name]))
}

// StartTurn prompts the OpenCode session (POST …/prompt_async) and returns
// once OpenCode accepted the prompt. A previous turn still winding down
// (interrupted) is waited for first.
func (s *session) StartTurn(ctx context.Context, t driver.Turn) error {
	if t.Thread != s.thread {
		return fmt.Errorf("opencode: session %s serves thread %s, not %s", s.id, s.thread, t.Thread)
	}
	for {
		s.mu.Lock()
		if s.exited {
			s.mu.Unlock()
			return fmt.Errorf("opencode: turn %s: the server has exited", t.ID)
		}
		prev := s.turn
		if prev == nil {
			break // s.mu held
		}
		s.mu.Unlock()
		select {
		case <-prev.ended:
		case <-ctx.Done():
			return fmt.Errorf("opencode: turn %s: turn %s has not ended: %w", t.ID, prev.id, ctx.Err())
		}
	}
	ts := &turnState{id: t.ID, ended: make(chan struct{})}
	s.turn = ts
	clear(s.seen)
	s.mu.Unlock()
	err := s.api.do(ctx, http.MethodPost, sessionPath(s.oc, "/prompt_async"),
		prompt{Model: s.cfg.model(), Parts: []textPart{{Type: "text", Text: t.Input}}}, nil)
	if err != nil {
		s.mu.Lock()
		if s.turn == ts {
			s.turn = nil
			close(ts.ended)
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// Interrupt aborts the OpenCode session's run (POST …/abort) if turn is
// the one in progress; its end is reported when OpenCode goes idle.
func (s *session) Interrupt(ctx context.Context, thread, turn string) error {
	if thread != s.thread {
		return fmt.Errorf("opencode: session %s serves thread %s, not %s", s.id, s.thread, thread)
	}
	s.mu.Lock()
	ts := s.turn
	if ts == nil || ts.id != turn {
		s.mu.Unlock()
		return nil
	}
	ts.interrupted = true
	s.mu.Unlock()
	return s.abort(ctx)
}

func (s *session) abort(ctx context.Context) error {
	var ok bool
	return s.api.do(ctx, http.MethodPost, sessionPath(s.oc, "/abort"), nil, &ok)
}
