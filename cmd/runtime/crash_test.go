package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The crash test of SPEC §3.8 on the real binary: `runtime serve
// --state-dir DIR` is killed with SIGKILL at random moments while four
// workers drive lifecycle writes through the admin API and MCP, restarted
// on the same directory, and checked against a model of what was
// acknowledged before the kill.
//
// The model records only what was acknowledged: a 2xx answer read whole.
// A call whose answer the kill cut off is "maybe": either outcome is
// accepted at the next start, which is then adopted as what happened —
// never both, never twice, and never undone later. Each worker owns its
// threads and client grants, and calls one at a time, so at a kill each
// worker has at most one call in flight.

const (
	crashWorkers      = 4
	crashDefaultKills = 200
	// crashMaxOpen is how many active threads (and live client grants) a
	// worker keeps: the state file grows, each cycle's checks stay short.
	crashMaxOpen = 3
	// crashSample is how many settled entities (closed threads, revoked
	// clients, refused tokens checked before) a worker re-checks per start.
	crashSample = 3
)

// crashKills is the number of kills: CRASH_KILLS (`make crash-long`) or 200.
func crashKills(t *testing.T) int {
	s := os.Getenv("CRASH_KILLS")
	if s == "" {
		return crashDefaultKills
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("CRASH_KILLS=%q: want a whole number from 1", s)
	}
	return n
}

// TestCrashRestart builds the binary, then 200 times: starts it on the same
// state directory, checks the state against the model, lets four workers
// write for 20–150 ms and kills the process with SIGKILL. After the last
// kill it starts once more, checks everything (the listing too), and stops
// it with SIGTERM.
func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and kills it 200 times")
	}
	kills := crashKills(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CRASH_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("kills %d, seed %d (CRASH_SEED)", kills, seed)

	dir := t.TempDir()
	h := &crashHarness{
		t:         t,
		bin:       filepath.Join(dir, "runtime"),
		stateDir:  filepath.Join(dir, "state"),
		home:      filepath.Join(dir, "home"),
		tokenFile: filepath.Join(dir, "run", "admin-token"),
	}
	build := exec.Command("go", "build", "-o", h.bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(h.home, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cleanup)

	rng := rand.New(rand.NewPCG(seed, 0))
	workers := make([]*crashWorker, crashWorkers)
	for i := range workers {
		workers[i] = &crashWorker{t: t, id: i, inst: fmt.Sprintf("w%d-inst", i), rng: rand.New(rand.NewPCG(seed, uint64(i+1)))}
	}
	var prev *crashProc
	for kill := 0; ; kill++ {
		p := h.start(prev)
		final := kill == kills
		h.each(workers, func(w *crashWorker) { w.check(p, final) })
		if final {
			crashCheckListings(t, p, workers)
		}
		if t.Failed() {
			t.Fatalf("checks after kill %d failed (seed %d); logs of this start:\n%s\nlast lines of the killed run:\n%s",
				kill, seed, p.logs.String(), crashTail(prev))
		}
		if final {
			p.stop()
			break
		}
		delay := 20*time.Millisecond + time.Duration(rng.Int64N(int64(130*time.Millisecond)))
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() { w.work(p) })
		}
		time.Sleep(delay)
		p.kill()
		crashWait(t, &wg, "workers after the kill")
		if t.Failed() {
			t.Fatalf("cycle %d failed (seed %d); logs:\n%s", kill+1, seed, p.logs.String())
		}
		prev = p
	}
	var st crashStats
	for _, w := range workers {
		st.add(w.stats)
	}
	t.Logf("%d kills: %d calls acknowledged, %d writes cut off by a kill (of the durable ones, %d found done after the restart, %d not), %d checks",
		kills, st.acked, st.maybe, st.maybeDone, st.maybeUndone, st.checks)
}

// ---- the process ----

type crashHarness struct {
	t                              *testing.T
	bin, stateDir, home, tokenFile string

	mu  sync.Mutex
	cur *crashProc // the process running, for the cleanup
}

// crashProc is one run of the binary.
type crashProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	logs    *syncBuffer
	exited  chan struct{} // closed once the process is waited for
	waitErr error         // set before exited is closed
	// killed is set just before SIGKILL: a transport error seen while it
	// is false is not the kill's doing.
	killed                     atomic.Bool
	mcpURL, adminURL, adminTok string
	http                       *http.Client
}

// start runs the binary on the state directory and waits for its ready
// line. A start that fails is a test failure, with its logs.
func (h *crashHarness) start(prev *crashProc) *crashProc {
	t := h.t
	t.Helper()
	cmd := exec.Command(h.bin, "--state-dir", h.stateDir, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-format", "json", "--no-demo")
	cmd.Env = []string{"RUNTIME_ADMIN_TOKEN_FILE=" + h.tokenFile, "HOME=" + h.home}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &crashProc{t: t, cmd: cmd, logs: &syncBuffer{}, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.cur = p
	h.mu.Unlock()
	readyc := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.logs.Write(append(sc.Bytes(), '\n'))
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "runtime ready" {
				readyc <- rec
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	var ready map[string]any
	select {
	case ready = <-readyc:
	case <-p.exited:
		t.Fatalf("runtime did not start on the state directory: %v\nlogs:\n%s\nlast lines of the killed run:\n%s",
			p.waitErr, p.logs.String(), crashTail(prev))
	case <-time.After(time.Minute): // detects a hang only
		t.Fatalf("runtime not ready; logs:\n%s", p.logs.String())
	}
	p.mcpURL, _ = ready["mcp"].(string)
	admin, _ := ready["admin"].(string)
	p.adminURL = strings.TrimSuffix(admin, "/")
	if !strings.HasPrefix(p.mcpURL, "http://127.0.0.1:") || !strings.HasPrefix(p.adminURL, "http://127.0.0.1:") {
		t.Fatalf("ready line: %v", ready)
	}
	tok, err := os.ReadFile(h.tokenFile)
	if err != nil {
		t.Fatalf("admin token file: %v", err)
	}
	p.adminTok = strings.TrimSpace(string(tok))
	p.http = &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 2 * crashWorkers},
		Timeout:   30 * time.Second, // detects a hang only
	}
	return p
}

// kill sends SIGKILL to the process (by its PID, through cmd.Process) and
// waits for it to be gone. A process that exited before is a failure.
func (p *crashProc) kill() {
	select {
	case <-p.exited:
		p.t.Errorf("runtime exited before the kill: %v", p.waitErr)
		return
	default:
	}
	p.killed.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Errorf("SIGKILL: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute): // detects a hang only
		p.t.Fatalf("runtime %d not gone after SIGKILL", p.cmd.Process.Pid)
	}
	p.http.CloseIdleConnections()
}

// stop sends SIGTERM and expects a clean exit: the file the kills left is
// one the runtime also shuts down on.
func (p *crashProc) stop() {
	p.killed.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
		if p.waitErr != nil {
			p.t.Errorf("exit after SIGTERM: %v\nlogs:\n%s", p.waitErr, p.logs.String())
		}
	case <-time.After(time.Minute): // detects a hang only
		p.t.Fatalf("no exit after SIGTERM; logs:\n%s", p.logs.String())
	}
	p.http.CloseIdleConnections()
}

// cleanup kills the process still running, if any: only the one started.
func (h *crashHarness) cleanup() {
	h.mu.Lock()
	p := h.cur
	h.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
	}
}

// each runs f for every worker at once and waits.
func (h *crashHarness) each(workers []*crashWorker, f func(*crashWorker)) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { f(w) })
	}
	crashWait(h.t, &wg, "the checks")
}

func crashWait(t *testing.T, wg *sync.WaitGroup, what string) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // detects a hang only
		t.Fatalf("%s did not finish", what)
	}
}

// crashTail is the last lines of a run's logs ("" without one).
func crashTail(p *crashProc) string {
	if p == nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(p.logs.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// ---- HTTP ----

// errUnsent marks a call not made because the process was already killed.
var errUnsent = errors.New("not sent: the process was killed")

// do sends one request and reads the whole answer. An error is a
// transport error (the answer, or part of it, never came).
func (p *crashProc) do(method, url, auth string, hdr map[string]string, body []byte) (int, http.Header, []byte, error) {
	if p.killed.Load() {
		return 0, nil, nil, errUnsent
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

// admin calls the admin API: path is under /admin/v1.
func (p *crashProc) admin(method, path string, body any) (int, []byte, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return 0, nil, err
		}
	}
	st, _, out, err := p.do(method, p.adminURL+path, "Bearer "+p.adminTok, nil, b)
	return st, out, err
}

// crashMCP is one MCP session of one token.
type crashMCP struct {
	p    *crashProc
	auth string
	sid  string
	id   int
}

const crashInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"crash","version":"1"}}}`

// post sends one JSON-RPC message; the answer is the JSON-RPC message of
// the body, a JSON one or the last of an event stream.
func (m *crashMCP) post(body string) (int, []byte, error) {
	hdr := map[string]string{"Accept": "application/json, text/event-stream"}
	if m.sid != "" {
		hdr["Mcp-Session-Id"] = m.sid
		hdr["MCP-Protocol-Version"] = "2025-11-25"
	}
	st, h, b, err := m.p.do(http.MethodPost, m.p.mcpURL, m.auth, hdr, []byte(body))
	if err != nil {
		return 0, nil, err
	}
	if sid := h.Get("Mcp-Session-Id"); sid != "" {
		m.sid = sid
	}
	if strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		var last []byte
		for line := range strings.SplitSeq(string(b), "\n") {
			if data, ok := strings.CutPrefix(line, "data:"); ok && strings.TrimSpace(data) != "" {
				last = []byte(strings.TrimSpace(data))
			}
		}
		b = last
	}
	return st, b, nil
}

// initialize opens the session: 200 when the token authenticates, 401
// when it is refused.
func (m *crashMCP) initialize() (int, error) {
	st, b, err := m.post(crashInitialize)
	if err != nil || st != http.StatusOK {
		return st, err
	}
	if m.sid == "" || !bytes.Contains(b, []byte(`"protocolVersion"`)) {
		return 0, fmt.Errorf("initialize answered 200 without a session: %s", b)
	}
	if st, _, err := m.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || st != http.StatusAccepted {
		return st, err
	}
	return http.StatusOK, nil
}

// auth says whether tok authenticates on /mcp: the status of an initialize.
func (p *crashProc) auth(tok string) (int, error) {
	if !strings.HasPrefix(tok, "Bearer ") {
		tok = "Bearer " + tok
	}
	st, _, _, err := p.do(http.MethodPost, p.mcpURL, tok, map[string]string{"Accept": "application/json, text/event-stream"}, []byte(crashInitialize))
	return st, err
}

// ---- the model ----

type crashMsg struct {
	text string
	seq  uint64
}

// crashThread is a thread of the model.
type crashThread struct {
	id string
	// What the store holds, as acknowledged.
	status  string // "active" or "archived"
	deleted bool
	msgs    []crashMsg
	// What a call cut off by a kill may have done.
	maybeCreated, maybeArchived, maybeDeleted bool
	maybeMsg                                  string
	// dirty: changed since the last check; it is checked at the next start.
	dirty bool

	// The live part, of the process running only.
	session  string // provider session id, "" if none
	detached bool
	token    string // its provider credential, "Bearer …"
	run      bool
	mcp      *crashMCP
}

func (th *crashThread) open() bool { return !th.deleted && th.status == "active" }

// crashClient is a client grant of the model.
type crashClient struct {
	id      string
	revoked bool
	tokens  []*crashToken // live or maybe revoked
	// unknown counts tokens possibly issued whose answer a kill cut off.
	unknown      int
	maybeRevoked bool
	dirty        bool
}

type crashToken struct {
	tok          string
	maybeRevoked bool
}

// crashRefused is a token that must be refused after a restart (and at once
// when now): a revoked client token, or any provider token (their
// sessions die with the process).
type crashRefused struct {
	tok, what string
	now       bool // refused already in the process that minted it
	checked   bool // checked after a restart at least once
	thread    string
}

type crashStats struct{ acked, maybe, maybeDone, maybeUndone, checks int }

func (s *crashStats) add(o crashStats) {
	s.acked += o.acked
	s.maybe += o.maybe
	s.maybeDone += o.maybeDone
	s.maybeUndone += o.maybeUndone
	s.checks += o.checks
}

// crashWorker drives and models its own threads and client grants.
type crashWorker struct {
	t   *testing.T
	id  int
	rng *rand.Rand

	inst                string
	instDone, instMaybe bool
	threads             []*crashThread
	clients             []*crashClient // live or maybe revoked
	revoked             []*crashClient
	refused             []*crashRefused
	nextThread, nextMsg int
	unknownClients      int // client grants possibly issued whose answer a kill cut off
	stats               crashStats
	stopped             bool // this cycle: the kill (or a failure) ended the work
}

func (w *crashWorker) errorf(format string, args ...any) {
	w.t.Helper()
	w.t.Errorf("worker %d: "+format, append([]any{w.id}, args...)...)
}

// ---- the checks after a start ----

// check compares what the store holds with the model, resolves what a
// kill left "maybe", and resets the live part (no provider session, run
// or MCP session outlives the process). With final, everything is
// checked; otherwise what changed since the last start, every live entity
// and a sample of the settled ones.
func (w *crashWorker) check(p *crashProc, final bool) {
	w.checkInstance(p)
	var settled []*crashThread
	for _, th := range w.threads {
		th.session, th.detached, th.token, th.run, th.mcp = "", false, "", false, nil
		if final || th.dirty || th.open() || th.maybeCreated || th.maybeArchived || th.maybeDeleted || th.maybeMsg != "" {
			w.checkThread(p, th)
		} else {
			settled = append(settled, th)
		}
	}
	for _, i := range w.sample(len(settled)) {
		w.checkThread(p, settled[i])
	}
	for _, c := range slices.Clone(w.clients) {
		w.checkClient(p, c)
	}
	var old []*crashClient
	for _, c := range w.revoked {
		if final || c.dirty {
			w.checkClient(p, c)
		} else {
			old = append(old, c)
		}
	}
	for _, i := range w.sample(len(old)) {
		w.checkClient(p, old[i])
	}
	w.checkThreadRead(p)
	var checked []*crashRefused
	for _, r := range w.refused {
		if final || !r.checked {
			w.checkRefused(p, r)
		} else {
			checked = append(checked, r)
		}
	}
	for _, i := range w.sample(len(checked)) {
		w.checkRefused(p, checked[i])
	}
	for _, r := range w.refused {
		r.now = true // every provider session of before is gone
	}
}

// sample picks up to crashSample distinct indexes below n.
func (w *crashWorker) sample(n int) []int {
	if n > crashSample {
		return w.rng.Perm(n)[:crashSample]
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

func (w *crashWorker) resolved(done bool) {
	if done {
		w.stats.maybeDone++
	} else {
		w.stats.maybeUndone++
	}
}

// checkInstance: a registered instance is still there (registering it
// again with another spec is instance_exists); one whose registration a
// kill cut off is registered again (the same spec is accepted either way).
func (w *crashWorker) checkInstance(p *crashProc) {
	if w.instMaybe {
		st, b, err := p.admin(http.MethodPost, "/instances", map[string]any{"id": w.inst, "driver": "inproc"})
		if err != nil || st != http.StatusCreated {
			w.errorf("registering instance %s again after a kill cut off its registration: %d %s %v", w.inst, st, b, err)
			return
		}
		w.instMaybe, w.instDone = false, true
		return
	}
	if !w.instDone {
		return
	}
	w.stats.checks++
	st, b, err := p.admin(http.MethodPost, "/instances", map[string]any{"id": w.inst, "driver": "inproc", "capabilities": []string{"crash-probe"}})
	if err != nil || st != http.StatusConflict || !bytes.Contains(b, []byte(`"instance_exists"`)) {
		w.errorf("instance %s, acknowledged before a kill: registering it with another spec answered %d %s %v; want 409 instance_exists",
			w.inst, st, b, err)
	}
}

// checkThread reads the thread from the admin API and checks it against
// the model, then adopts what it found for what was maybe.
func (w *crashWorker) checkThread(p *crashProc, th *crashThread) {
	w.stats.checks++
	st, b, err := p.admin(http.MethodGet, "/threads/"+th.id, nil)
	if err != nil {
		w.errorf("GET thread %s: %v", th.id, err)
		return
	}
	switch st {
	case http.StatusNotFound:
		switch {
		case th.deleted:
		case th.maybeCreated:
			w.resolved(false)
			th.deleted = true // never created: it must stay 404
		case th.maybeDeleted:
			w.resolved(true)
			th.deleted = true
		default:
			w.errorf("thread %s (status %s, %d messages acknowledged) is gone after a kill: 404 %s", th.id, th.status, len(th.msgs), b)
			th.deleted = true
		}
		th.maybeCreated, th.maybeArchived, th.maybeDeleted, th.maybeMsg, th.dirty = false, false, false, "", false
		th.msgs = nil
		return
	case http.StatusOK:
	default:
		w.errorf("GET thread %s: %d %s", th.id, st, b)
		return
	}
	if th.deleted {
		w.errorf("deleted thread %s is back after a kill: %s", th.id, b)
		return
	}
	var got struct {
		ID       string          `json:"id"`
		Status   string          `json:"status"`
		Instance string          `json:"instance"`
		Run      json.RawMessage `json:"run"`
		Messages []struct {
			Seq  uint64 `json:"seq"`
			Text string `json:"text"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		w.errorf("thread %s: %v in %s", th.id, err, b)
		return
	}
	if th.maybeCreated {
		w.resolved(true)
	}
	if th.maybeDeleted {
		w.resolved(false)
	}
	switch {
	case got.Status == th.status:
		if th.maybeArchived {
			w.resolved(false)
		}
	case th.maybeArchived && got.Status == "archived":
		w.resolved(true)
	default:
		w.errorf("thread %s: status %q after a kill, acknowledged %q", th.id, got.Status, th.status)
	}
	if got.Instance != w.inst {
		w.errorf("thread %s: instance %q after a kill, want %q", th.id, got.Instance, w.inst)
	}
	if len(got.Run) != 0 && string(got.Run) != "null" {
		w.errorf("thread %s: a run survived the restart: %s", th.id, got.Run)
	}
	// The messages: every acknowledged post, in order, with its seq; then
	// at most the post a kill cut off; nothing else, nothing twice.
	seen := map[string]int{}
	for i, m := range got.Messages {
		seen[m.Text]++
		if seen[m.Text] == 2 {
			w.errorf("thread %s: message %q twice (at %d)", th.id, m.Text, i)
		}
		if i > 0 && m.Seq <= got.Messages[i-1].Seq {
			w.errorf("thread %s: message seqs out of order at %d: %d after %d", th.id, i, m.Seq, got.Messages[i-1].Seq)
		}
	}
	for i, m := range th.msgs {
		if i >= len(got.Messages) {
			w.errorf("thread %s: acknowledged message %q (seq %d) lost: %d messages, %d acknowledged", th.id, m.text, m.seq, len(got.Messages), len(th.msgs))
			break
		}
		if got.Messages[i].Text != m.text || got.Messages[i].Seq != m.seq {
			w.errorf("thread %s: message %d is %q (seq %d), acknowledged %q (seq %d)", th.id, i, got.Messages[i].Text, got.Messages[i].Seq, m.text, m.seq)
			break
		}
	}
	switch extra := got.Messages[min(len(th.msgs), len(got.Messages)):]; {
	case len(extra) == 0:
		if th.maybeMsg != "" {
			w.resolved(false)
		}
	case len(extra) == 1 && th.maybeMsg != "" && extra[0].Text == th.maybeMsg:
		w.resolved(true)
		th.msgs = append(th.msgs, crashMsg{text: extra[0].Text, seq: extra[0].Seq})
	default:
		w.errorf("thread %s: messages nobody had acknowledged: %+v (cut off by the kill: %q)", th.id, extra, th.maybeMsg)
	}
	th.status = got.Status
	th.maybeCreated, th.maybeArchived, th.maybeDeleted, th.maybeMsg, th.dirty = false, false, false, "", false
}

// checkThreadRead reads one of the worker's threads with messages through
// MCP, thread_read with a live client token: its recent messages are the
// model's (just checked against the admin view and adopted).
func (w *crashWorker) checkThreadRead(p *crashProc) {
	var ths []*crashThread
	for _, th := range w.threads {
		if !th.deleted && len(th.msgs) > 0 {
			ths = append(ths, th)
		}
	}
	var toks []string
	for _, c := range w.clients {
		for _, tk := range c.tokens {
			toks = append(toks, tk.tok)
		}
	}
	if len(ths) == 0 || len(toks) == 0 {
		return
	}
	th, tok := ths[w.rng.IntN(len(ths))], toks[w.rng.IntN(len(toks))]
	w.stats.checks++
	m := &crashMCP{p: p, auth: "Bearer " + tok, id: 1}
	if st, err := m.initialize(); err != nil || st != http.StatusOK {
		w.errorf("initialize with a live client token: %d %v", st, err)
		return
	}
	st, b, err := m.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_read","arguments":{"threadId":%q}}}`, th.id))
	var got struct {
		Result struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Messages []struct {
					Seq  uint64 `json:"seq"`
					Text string `json:"text"`
				} `json:"messages"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	if err != nil || st != http.StatusOK || json.Unmarshal(b, &got) != nil || got.Result.IsError {
		w.errorf("thread_read %s: %d %s %v", th.id, st, b, err)
		return
	}
	msgs := got.Result.StructuredContent.Messages
	want := th.msgs[max(0, len(th.msgs)-50):]
	ok := len(msgs) == len(want)
	for i := 0; ok && i < len(msgs); i++ {
		ok = msgs[i].Text == want[i].text && msgs[i].Seq == want[i].seq
	}
	if !ok {
		w.errorf("thread_read %s: messages %+v, the model's last ones %+v", th.id, msgs, want)
	}
}

// checkClient reads a client grant and checks its tokens: the live ones
// authenticate, the revoked ones are refused.
func (w *crashWorker) checkClient(p *crashProc, c *crashClient) {
	w.stats.checks++
	st, b, err := p.admin(http.MethodGet, "/clients/"+c.id, nil)
	if err != nil {
		w.errorf("GET client %s: %v", c.id, err)
		return
	}
	c.dirty = false
	switch {
	case st == http.StatusNotFound && c.revoked:
		return
	case st == http.StatusNotFound && c.maybeRevoked:
		w.resolved(true)
		w.revokeClientModel(c, false)
		return
	case st == http.StatusNotFound:
		w.errorf("client grant %s, acknowledged live, is gone after a kill: %s", c.id, b)
		return
	case st != http.StatusOK:
		w.errorf("GET client %s: %d %s", c.id, st, b)
		return
	case c.revoked:
		w.errorf("revoked client grant %s is back after a kill: %s", c.id, b)
		return
	}
	if c.maybeRevoked {
		// The revoke a kill cut off did not happen: every token is live.
		w.resolved(false)
		c.maybeRevoked = false
		for _, tk := range c.tokens {
			tk.maybeRevoked = false
		}
	}
	var got struct {
		LiveTokens int `json:"liveTokens"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		w.errorf("client %s: %v in %s", c.id, err, b)
		return
	}
	var live []*crashToken
	// A refresh with revokePrevious that a kill cut off revoked every
	// earlier token or none.
	anyMaybe, anyRevoked, anyKept := false, false, false
	for _, tk := range c.tokens {
		anyMaybe = anyMaybe || tk.maybeRevoked
		w.stats.checks++
		st, err := p.auth(tk.tok)
		switch {
		case err != nil:
			w.errorf("client %s token: %v", c.id, err)
			live = append(live, tk)
		case st == http.StatusOK:
			anyKept = anyKept || tk.maybeRevoked
			tk.maybeRevoked = false
			live = append(live, tk)
		case st == http.StatusUnauthorized && tk.maybeRevoked:
			anyRevoked = true
			w.refused = append(w.refused, &crashRefused{tok: tk.tok, what: "client " + c.id + " token (revoked by a refresh a kill cut off)", now: true, checked: true})
		default:
			w.errorf("client %s: a live token, acknowledged before the kill, answered %d after it", c.id, st)
			live = append(live, tk)
		}
	}
	c.tokens = live
	if anyMaybe {
		w.resolved(anyRevoked)
		if anyRevoked && anyKept {
			w.errorf("client %s: a refresh with revokePrevious, cut off by a kill, revoked some earlier tokens and not others", c.id)
		}
	}
	if got.LiveTokens < len(live) || got.LiveTokens > len(live)+c.unknown {
		w.errorf("client %s: liveTokens %d, the model knows %d live and %d possibly issued by calls a kill cut off",
			c.id, got.LiveTokens, len(live), c.unknown)
	}
}

// checkRefused: the token is refused (401) on /mcp.
func (w *crashWorker) checkRefused(p *crashProc, r *crashRefused) {
	w.stats.checks++
	st, err := p.auth(r.tok)
	if err != nil {
		w.errorf("%s: %v", r.what, err)
		return
	}
	if st != http.StatusUnauthorized {
		w.errorf("%s authenticates after a kill: %d, want 401", r.what, st)
	}
	r.checked = true
}

// crashCheckListings: after the final start, the thread listing is exactly
// the threads the model says exist, and the client listing holds every
// live admin grant, no revoked one, and no more others than issues a
// kill cut off.
func crashCheckListings(t *testing.T, p *crashProc, workers []*crashWorker) {
	want := map[string]bool{}
	live, revoked := map[string]bool{}, map[string]bool{}
	unknown := 0
	for _, w := range workers {
		for _, th := range w.threads {
			if !th.deleted {
				want[th.id] = true
			}
		}
		for _, c := range w.clients {
			live[c.id] = true
		}
		for _, c := range w.revoked {
			revoked[c.id] = true
		}
		unknown += w.unknownClients
	}
	var threads []string
	crashPages(t, p, "/threads", "threads", func(raw json.RawMessage) {
		var th struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw, &th)
		threads = append(threads, th.ID)
	})
	for _, id := range threads {
		if !want[id] {
			t.Errorf("thread %s is listed, the model has it deleted or never created", id)
		}
		delete(want, id)
	}
	for id := range want {
		t.Errorf("thread %s is not listed", id)
	}
	others := 0
	crashPages(t, p, "/clients", "clients", func(raw json.RawMessage) {
		var c struct {
			ID   string `json:"id"`
			Kind string `json:"kind"`
		}
		_ = json.Unmarshal(raw, &c)
		switch {
		case revoked[c.ID]:
			t.Errorf("revoked client grant %s is listed", c.ID)
		case live[c.ID]:
			delete(live, c.ID)
		default:
			others++
		}
	})
	for id := range live {
		t.Errorf("live client grant %s is not listed", id)
	}
	if others > unknown {
		t.Errorf("%d client grants listed that the model does not know, %d issues were cut off by a kill", others, unknown)
	}
}

// crashPages reads every page of a listing, calling f with each item.
func crashPages(t *testing.T, p *crashProc, path, field string, f func(json.RawMessage)) {
	cursor := ""
	for range 10000 {
		q := path + "?limit=1000"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		st, b, err := p.admin(http.MethodGet, q, nil)
		if err != nil || st != http.StatusOK {
			t.Errorf("GET %s: %d %s %v", q, st, b, err)
			return
		}
		var page map[string]json.RawMessage
		var items []json.RawMessage
		if err := json.Unmarshal(b, &page); err != nil || json.Unmarshal(page[field], &items) != nil {
			t.Errorf("GET %s: %s", q, b)
			return
		}
		for _, it := range items {
			f(it)
		}
		cursor = ""
		if nc, ok := page["nextCursor"]; ok {
			_ = json.Unmarshal(nc, &cursor)
		}
		if cursor == "" {
			return
		}
	}
	t.Errorf("GET %s: no last page", path)
}

// ---- the work between two kills ----

// work makes calls until one fails: the kill, or a failure.
func (w *crashWorker) work(p *crashProc) {
	w.stopped = false
	for !w.stopped {
		w.step(p)
	}
}

// call makes one admin call for an op. ok: acknowledged with want. A
// transport error is the kill's (an error when the process was not
// killed); another status is a failure. Either stops the work.
func (w *crashWorker) call(p *crashProc, op, method, path string, body any, want int) ([]byte, bool) {
	st, b, err := p.admin(method, path, body)
	return b, w.answer(p, op, true, st, b, err, want)
}

// answer judges the answer of a call (write: one that changes the store).
func (w *crashWorker) answer(p *crashProc, op string, write bool, st int, b []byte, err error, want int) bool {
	w.t.Helper()
	if err != nil {
		w.stopped = true
		if !p.killed.Load() {
			w.errorf("%s: %v (before the kill)", op, err)
		} else if write {
			w.stats.maybe++
		}
		return false
	}
	if st != want {
		w.stopped = true
		w.errorf("%s: %d %s, want %d", op, st, b, want)
		return false
	}
	w.stats.acked++
	return true
}

// step makes one call, chosen among those the model allows.
func (w *crashWorker) step(p *crashProc) {
	if p.killed.Load() {
		w.stopped = true
		return
	}
	if !w.instDone {
		w.createInstance(p)
		return
	}
	var open, archived []*crashThread
	for _, th := range w.threads {
		switch {
		case th.open():
			open = append(open, th)
		case !th.deleted:
			archived = append(archived, th)
		}
	}
	type choice struct {
		weight int
		f      func()
	}
	var cs []choice
	add := func(weight int, f func()) { cs = append(cs, choice{weight, f}) }
	if len(open) < crashMaxOpen {
		add(3, func() { w.createThread(p) })
	}
	if len(open) > 0 {
		th := open[w.rng.IntN(len(open))]
		switch {
		case th.session == "" || th.detached:
			add(4, func() { w.openSession(p, th) })
		case !th.run:
			add(4, func() { w.startRun(p, th) })
		default:
			add(8, func() { w.post(p, th) })
			add(1, func() { w.endRun(p, th) })
		}
		if th.session != "" && !th.detached {
			add(1, func() { w.rotate(p, th) })
			add(1, func() { w.detach(p, th) })
			add(1, func() { w.release(p, th) })
		}
		add(1, func() { w.archive(p, th) })
		add(1, func() { w.deleteThread(p, th) })
	}
	if len(archived) > 0 {
		// Archived threads are deleted too: the threads in the store stay
		// below --max-threads however many kills (crash-long).
		th := archived[w.rng.IntN(len(archived))]
		add(1, func() { w.deleteThread(p, th) })
	}
	if len(w.clients) < crashMaxOpen {
		add(2, func() { w.issueClient(p) })
	}
	if len(w.clients) > 0 {
		c := w.clients[w.rng.IntN(len(w.clients))]
		add(2, func() { w.refreshClient(p, c) })
		add(1, func() { w.revokeClient(p, c) })
		add(1, func() { w.authLive(p, c) })
	}
	if len(w.refused) > 0 {
		add(1, func() { w.authRefused(p) })
	}
	total := 0
	for _, c := range cs {
		total += c.weight
	}
	n := w.rng.IntN(total)
	for _, c := range cs {
		if n < c.weight {
			c.f()
			return
		}
		n -= c.weight
	}
}

func (w *crashWorker) createInstance(p *crashProc) {
	w.instMaybe = true
	if _, ok := w.call(p, "register instance "+w.inst, http.MethodPost, "/instances",
		map[string]any{"id": w.inst, "driver": "inproc"}, http.StatusCreated); ok {
		w.instMaybe, w.instDone = false, true
	}
}

func (w *crashWorker) createThread(p *crashProc) {
	th := &crashThread{id: fmt.Sprintf("w%d-t%d", w.id, w.nextThread), status: "active", maybeCreated: true, dirty: true}
	w.nextThread++
	w.threads = append(w.threads, th)
	if _, ok := w.call(p, "create thread "+th.id, http.MethodPost, "/threads",
		map[string]any{"id": th.id, "instance": w.inst}, http.StatusCreated); ok {
		th.maybeCreated = false
	}
}

func (w *crashWorker) openSession(p *crashProc, th *crashThread) {
	op := "open provider session on " + th.id
	st, b, err := p.admin(http.MethodPost, "/threads/"+th.id+"/provider-sessions", map[string]any{"instance": w.inst})
	if err == nil && st == http.StatusOK && th.detached {
		st = http.StatusCreated // re-attached: the detached session, reused
	}
	if !w.answer(p, op, true, st, b, err, http.StatusCreated) {
		return
	}
	var got struct {
		ID            string `json:"providerSessionId"`
		Authorization string `json:"authorization"`
		Reused        bool   `json:"reused"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		w.errorf("%s: %v in %s", op, err, b)
		w.stopped = true
		return
	}
	th.dirty = true
	if got.Reused {
		if got.ID != th.session {
			w.errorf("%s: reused session %s, the detached one is %s", op, got.ID, th.session)
		}
		th.detached = false
		return
	}
	if !strings.HasPrefix(got.Authorization, "Bearer ") {
		w.errorf("%s: authorization %q", op, got.Authorization)
		w.stopped = true
		return
	}
	th.session, th.detached, th.token, th.mcp = got.ID, false, got.Authorization, nil
	w.refused = append(w.refused, &crashRefused{tok: got.Authorization, what: "provider token of " + th.id + " (opened)", thread: th.id})
}

func (w *crashWorker) rotate(p *crashProc, th *crashThread) {
	b, ok := w.call(p, "rotate "+th.id, http.MethodPost, "/threads/"+th.id+"/rotate", map[string]any{"instance": w.inst}, http.StatusOK)
	if !ok {
		return
	}
	var got struct {
		Authorization string `json:"authorization"`
	}
	if err := json.Unmarshal(b, &got); err != nil || !strings.HasPrefix(got.Authorization, "Bearer ") {
		w.errorf("rotate %s: %s", th.id, b)
		w.stopped = true
		return
	}
	th.token, th.mcp = got.Authorization, nil
	w.refused = append(w.refused, &crashRefused{tok: got.Authorization, what: "provider token of " + th.id + " (rotated)", thread: th.id})
}

func (w *crashWorker) startRun(p *crashProc, th *crashThread) {
	if _, ok := w.call(p, "start run on "+th.id, http.MethodPost, "/threads/"+th.id+"/runs", map[string]any{"instance": w.inst}, http.StatusCreated); ok {
		th.run = true
	}
}

func (w *crashWorker) endRun(p *crashProc, th *crashThread) {
	if _, ok := w.call(p, "end run on "+th.id, http.MethodDelete, "/threads/"+th.id+"/runs/current", nil, http.StatusOK); ok {
		th.run = false
	}
}

func (w *crashWorker) detach(p *crashProc, th *crashThread) {
	if _, ok := w.call(p, "detach "+th.id, http.MethodPost, "/threads/"+th.id+"/detach", nil, http.StatusOK); ok {
		th.detached = true
	}
}

// release revokes the session's credentials: its tokens are refused at once.
func (w *crashWorker) release(p *crashProc, th *crashThread) {
	if _, ok := w.call(p, "release "+th.session, http.MethodDelete, "/provider-sessions/"+th.session, nil, http.StatusOK); ok {
		th.session, th.token, th.mcp = "", "", nil
		w.revokedNow(th.id)
	}
}

func (w *crashWorker) archive(p *crashProc, th *crashThread) {
	th.maybeArchived, th.dirty = true, true
	if _, ok := w.call(p, "archive "+th.id, http.MethodPost, "/threads/"+th.id+"/archive", nil, http.StatusOK); ok {
		th.maybeArchived, th.status = false, "archived"
		th.session, th.token, th.run, th.mcp = "", "", false, nil
		w.revokedNow(th.id)
	}
}

func (w *crashWorker) deleteThread(p *crashProc, th *crashThread) {
	th.maybeDeleted, th.dirty = true, true
	if _, ok := w.call(p, "delete "+th.id, http.MethodDelete, "/threads/"+th.id, nil, http.StatusOK); ok {
		th.maybeDeleted, th.deleted, th.msgs = false, true, nil
		th.session, th.token, th.run, th.mcp = "", "", false, nil
		w.revokedNow(th.id)
	}
}

// revokedNow marks every provider token of the thread refused already.
func (w *crashWorker) revokedNow(thread string) {
	for _, r := range w.refused {
		if r.thread == thread {
			r.now = true
		}
	}
}

// post posts a message with the thread's provider token over MCP.
func (w *crashWorker) post(p *crashProc, th *crashThread) {
	op := "thread_post on " + th.id
	if th.mcp == nil {
		m := &crashMCP{p: p, auth: th.token, id: 1}
		st, err := m.initialize()
		if !w.answer(p, op+": initialize", false, st, nil, err, http.StatusOK) {
			return
		}
		th.mcp = m
	}
	text := fmt.Sprintf("%s-m%d", th.id, w.nextMsg)
	w.nextMsg++
	th.maybeMsg, th.dirty = text, true
	th.mcp.id++
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": th.mcp.id, "method": "tools/call",
		"params": map[string]any{"name": "thread_post", "arguments": map[string]any{"text": text}}})
	st, b, err := th.mcp.post(string(req))
	if !w.answer(p, op, true, st, b, err, http.StatusOK) {
		return
	}
	var got struct {
		Result struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Seq  uint64 `json:"seq"`
				Text string `json:"text"`
			} `json:"structuredContent"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Error != nil || got.Result.IsError || got.Result.StructuredContent.Text != text {
		w.errorf("%s: %s", op, b)
		w.stopped = true
		return
	}
	th.msgs = append(th.msgs, crashMsg{text: text, seq: got.Result.StructuredContent.Seq})
	th.maybeMsg = ""
}

func (w *crashWorker) issueClient(p *crashProc) {
	access := []string{"read-only", "read-write"}[w.rng.IntN(2)]
	w.unknownClients++
	b, ok := w.call(p, "issue client", http.MethodPost, "/clients", map[string]any{"label": fmt.Sprintf("w%d", w.id), "access": access}, http.StatusCreated)
	if !ok {
		return
	}
	w.unknownClients--
	var got struct {
		ClientID string `json:"clientId"`
		Token    string `json:"token"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.ClientID == "" || got.Token == "" {
		w.errorf("issue client: %s", b)
		w.stopped = true
		return
	}
	w.clients = append(w.clients, &crashClient{id: got.ClientID, tokens: []*crashToken{{tok: got.Token}}, dirty: true})
}

func (w *crashWorker) refreshClient(p *crashProc, c *crashClient) {
	// Many live tokens: revoke them with the next refresh.
	revokePrevious := len(c.tokens) >= 3 || w.rng.IntN(2) == 0
	c.unknown++
	c.dirty = true
	if revokePrevious {
		for _, tk := range c.tokens {
			tk.maybeRevoked = true
		}
	}
	b, ok := w.call(p, "refresh client "+c.id, http.MethodPost, "/clients/"+c.id+"/refresh", map[string]any{"revokePrevious": revokePrevious}, http.StatusOK)
	if !ok {
		return
	}
	c.unknown--
	var got struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Token == "" {
		w.errorf("refresh client %s: %s", c.id, b)
		w.stopped = true
		return
	}
	if revokePrevious {
		for _, tk := range c.tokens {
			w.refused = append(w.refused, &crashRefused{tok: tk.tok, what: "client " + c.id + " token (revoked by a refresh)", now: true})
		}
		c.tokens, c.unknown = nil, 0 // every earlier token, known or not, is revoked
	}
	c.tokens = append(c.tokens, &crashToken{tok: got.Token})
}

func (w *crashWorker) revokeClient(p *crashProc, c *crashClient) {
	c.maybeRevoked, c.dirty = true, true
	for _, tk := range c.tokens {
		tk.maybeRevoked = true
	}
	if _, ok := w.call(p, "revoke client "+c.id, http.MethodDelete, "/clients/"+c.id, nil, http.StatusOK); ok {
		w.revokeClientModel(c, true)
	}
}

// revokeClientModel records c revoked: its tokens are refused from now on.
func (w *crashWorker) revokeClientModel(c *crashClient, acked bool) {
	what := "client " + c.id + " token (client revoked)"
	if !acked {
		what = "client " + c.id + " token (client revoked by a call a kill cut off)"
	}
	for _, tk := range c.tokens {
		w.refused = append(w.refused, &crashRefused{tok: tk.tok, what: what, now: true})
	}
	c.revoked, c.maybeRevoked, c.tokens, c.unknown, c.dirty = true, false, nil, 0, acked
	w.clients = slices.DeleteFunc(w.clients, func(x *crashClient) bool { return x == c })
	w.revoked = append(w.revoked, c)
}

// authLive: a live client token authenticates.
func (w *crashWorker) authLive(p *crashProc, c *crashClient) {
	if len(c.tokens) == 0 {
		return
	}
	tk := c.tokens[w.rng.IntN(len(c.tokens))]
	st, err := p.auth(tk.tok)
	w.answer(p, "authenticate with a live token of "+c.id, false, st, nil, err, http.StatusOK)
}

// authRefused: a token refused already stays refused.
func (w *crashWorker) authRefused(p *crashProc) {
	r := w.refused[w.rng.IntN(len(w.refused))]
	if !r.now {
		return
	}
	st, err := p.auth(r.tok)
	w.answer(p, "authenticate with "+r.what, false, st, nil, err, http.StatusUnauthorized)
}
