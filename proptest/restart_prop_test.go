package proptest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The durable lifecycle machine is the lifecycle machine on a state file
// (Config.StateFile, SPEC §3.8) with two more actions, interleaved with all
// the others:
//
//   - Restart: Close, then New on the same file with the same drivers and
//     clock. Threads with their messages, status, current instance,
//     archive and delete survive, and client grants with their tokens;
//     every provider credential still live is revoked (by Close, reason
//     shutdown), runs end, provider sessions are gone, and the provider
//     instances are registered again by the runtime itself.
//   - Crash: a crash cannot be made in-process, but Backup gives the state
//     of one moment. The machine takes a backup, makes a few more writes
//     the old runtime acknowledges (a thread, a post, a rotation, a client
//     grant: after the backup began, so they must NOT come back), closes
//     the old runtime without ever using its file again, and starts a
//     runtime on the copy: every write acknowledged before the backup is
//     there, the provider credentials live in it are revoked with reason
//     restart at start, and its active runs are ended.
//
// After either, the machine's Check (SPEC §6 invariant 1 and model
// agreement) runs as after every action, and every later action's checks
// (the switch story, credentials per pair, mutations need the active run,
// revoke holds) run against the restarted runtime.

// durableChecks: how many checks TestLifecycleMachineDurable runs when
// -rapid.checks (or RAPID_CHECKS) is not given explicitly: every check
// writes a state file, so fewer than the in-memory machine's.
const durableChecks = 100

// explicitOr is n, or every check when -rapid.checks or RAPID_CHECKS is
// given explicitly.
func explicitOr(n int) int {
	if machineChecks(1) == 1<<30 {
		return 1 << 30
	}
	return n
}

// durableState is the state file's side of a durable machine.
type durableState struct {
	dir     string
	path    string // the file the runtime of the moment runs on
	crashes int
	// gone are the provider sessions of the runtimes before this one: their
	// drivers' events reach no runtime any more.
	gone map[string]bool
}

// before reports whether provider session id belongs to a runtime before
// a restart; false in memory.
func (d *durableState) before(id string) bool { return d != nil && d.gone[id] }

func durableLifecycleProp(t *rapid.T) {
	dir, err := os.MkdirTemp("", "prop-state-")
	if err != nil {
		t.Fatalf("MkdirTemp: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // last: after the runtime's Close
	path := filepath.Join(dir, "state.db")
	s := newLifecycleMachineOn(t, path)
	s.durable = &durableState{dir: dir, path: path, gone: map[string]bool{}}
	actions := lifecycleActions(s)
	actions["Restart"] = s.restart
	actions["Crash"] = s.crash
	t.Repeat(actions)
	s.closeAndCheck(t)
}

// TestLifecycleMachineDurable runs the lifecycle state machine on a state
// file, with Restart and Crash among its actions.
func TestLifecycleMachineDurable(t *testing.T) {
	rapid.Check(t, limited(explicitOr(durableChecks), durableLifecycleProp))
}

// applyRestart is SPEC §3.8 in the model, at m.now: every provider
// credential still live is revoked (it fails as expired if it was past its
// expiry), every run ends, every provider session is gone. Threads,
// messages and client grants stay as they are. It returns the credentials
// it revoked.
func (m *model) applyRestart() []*modelCred {
	var revoked []*modelCred
	for _, c := range m.creds {
		if c.kind == kindProvider && c.state == credLive {
			m.revoke(c)
			revoked = append(revoked, c)
		}
	}
	for _, t := range m.threads {
		t.runID, t.runInstance, t.runStarted = "", "", time.Time{}
	}
	for _, s := range m.sessions {
		s.open, s.threads = false, nil
	}
	return revoked
}

// restart is the Restart action: Close, and New on the same file.
func (s *lifecycleMachine) restart(t *rapid.T) {
	call := "Restart"
	before := s.liveness()
	s.closeForRestart(t, call)
	revoked := s.m.applyRestart()
	s.reopen(t, call)
	s.checkRestarted(t, call, before, revoked, "shutdown")
}

// crash is the Crash action: a backup, writes after it, Close, and New on
// the backup's copy.
func (s *lifecycleMachine) crash(t *rapid.T) {
	s.durable.crashes++
	call := fmt.Sprintf("Crash %d", s.durable.crashes)
	before := s.liveness()
	var backup bytes.Buffer
	if n, err := s.rt.Backup(&backup); err != nil || n != int64(backup.Len()) {
		t.Fatalf("%s: Backup = %d, %v; wrote %d bytes", call, n, err, backup.Len())
	}
	lost := s.writeAfterBackup(t, call)
	s.closeForRestart(t, call)
	path := filepath.Join(s.durable.dir, fmt.Sprintf("crash-%d.db", s.durable.crashes))
	if err := os.WriteFile(path, backup.Bytes(), 0o600); err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	s.durable.path = path
	revoked := s.m.applyRestart()
	s.reopen(t, call)
	s.checkRestarted(t, call, before, revoked, "restart")
	lost.check(t, s, call)
}

// lostWrites are writes the old runtime acknowledged after the backup
// began: none of them may be on the copy.
type lostWrites struct {
	tokens []string // minted after the backup: unknown on the copy
	thread string   // created after the backup
	text   string   // posted after the backup, to thread postTo
	postTo string
}

// writeAfterBackup makes, on the old runtime, a drawn subset of: a client
// grant, a post by an agent that may mutate (to its own thread), a
// rotation of a live pair, a thread. The model records none of them.
func (s *lifecycleMachine) writeAfterBackup(t *rapid.T, call string) lostWrites {
	var lost lostWrites
	if rapid.Bool().Draw(t, "lostClient") {
		ct, err := s.rt.IssueClient(s.ctx, "lost", readWrite)
		if err != nil {
			t.Fatalf("%s: IssueClient after the backup: %v", call, err)
		}
		lost.tokens = append(lost.tokens, ct.Token)
	}
	var pairs, mutators []*modelCred
	for _, c := range s.m.creds {
		if c.kind == kindProvider && s.m.live(c) && s.m.predictRotate(c.thread, c.instance) == nil {
			pairs = append(pairs, c)
		}
		if s.m.mayMutate(c) && c.kind == kindProvider {
			mutators = append(mutators, c)
		}
	}
	if len(mutators) > 0 && rapid.Bool().Draw(t, "lostPost") {
		c := pick(t, "lostPoster", mutators)
		s.texts++
		lost.text, lost.postTo = fmt.Sprintf("lost message %d", s.texts), c.thread
		if _, err := s.rt.Post(s.ctx, s.m.principal(c), "", lost.text); err != nil {
			t.Fatalf("%s: Post(%s) after the backup: %v", call, c.id, err)
		}
	}
	if len(pairs) > 0 && rapid.Bool().Draw(t, "lostRotate") {
		c := pick(t, "lostRotated", pairs)
		cred, err := s.rt.Rotate(s.ctx, c.thread, c.instance)
		if err != nil {
			t.Fatalf("%s: Rotate(%s, %s) after the backup: %v", call, c.thread, c.instance, err)
		}
		lost.tokens = append(lost.tokens, bearerToken(t, call, cred.Authorization))
	}
	var free []string
	for _, id := range threadPool {
		if s.m.threads[id] == nil {
			free = append(free, id)
		}
	}
	if len(free) > 0 && rapid.Bool().Draw(t, "lostThread") {
		lost.thread = pick(t, "lostThreadID", free)
		if _, err := s.rt.CreateThread(s.ctx, lost.thread, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatalf("%s: CreateThread(%s) after the backup: %v", call, lost.thread, err)
		}
	}
	return lost
}

// check: the runtime on the copy has none of the lost writes.
func (lost lostWrites) check(t *rapid.T, s *lifecycleMachine, call string) {
	for _, tok := range lost.tokens {
		_, err := s.rt.Authenticate(tok)
		if ae := (*mcpruntime.AuthError)(nil); !errors.As(err, &ae) || ae.Reason != mcpruntime.AuthUnknown {
			t.Fatalf("%s: a token minted after the backup, on the copy: %v; want unknown", call, err)
		}
	}
	if lost.thread != "" {
		if th, err := s.rt.Thread(s.ctx, lost.thread); !errors.Is(err, mcpruntime.ErrUnknownThread) {
			t.Fatalf("%s: thread %s, created after the backup, on the copy: %+v, %v", call, lost.thread, th, err)
		}
	}
	if lost.text != "" && s.m.threads[lost.postTo] != nil {
		th, err := s.rt.Thread(s.ctx, lost.postTo)
		if err != nil {
			t.Fatalf("%s: Thread(%s) = %v", call, lost.postTo, err)
		}
		if slices.ContainsFunc(th.Messages, func(m mcpruntime.Message) bool { return m.Text == lost.text }) {
			t.Fatalf("%s: %q, posted after the backup, is on the copy", call, lost.text)
		}
	}
}

// closeForRestart closes the runtime of the moment: afterwards no token
// authenticates on it, each refused as revoked (SPEC §3.2).
func (s *lifecycleMachine) closeForRestart(t *rapid.T, call string) {
	s.unsubscribe()
	if err := s.rt.Close(); err != nil {
		t.Fatalf("%s: Close: %v", call, err)
	}
	for _, c := range s.m.creds {
		var ae *mcpruntime.AuthError
		if _, err := s.rt.Authenticate(c.token); !errors.As(err, &ae) || ae.Reason != mcpruntime.AuthRevoked {
			t.Fatalf("%s: after Close, Authenticate(%s: %s) = %v, want an AuthError, reason revoked", call, c.id, c.describe(), err)
		}
	}
}

// reopen starts a runtime on s.durable.path with the machine's config,
// and forgets what died with the old one: its provider sessions (their
// agents' turns with them) and its resource subscriptions. The machine's
// resources are registered again if they were (an embedder registers its
// resources at every start).
func (s *lifecycleMachine) reopen(t *rapid.T, call string) {
	cfg := s.cfg
	cfg.StateFile = s.durable.path
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		t.Fatalf("%s: New on %s: %v", call, cfg.StateFile, err)
	}
	s.rt = rt
	s.unsubscribe = subscribeCounting(rt.SubscribeProviderEvents, &s.closes)
	s.restored = map[string]bool{} // restored state is not journaled
	for _, c := range s.m.creds {
		s.restored[c.id] = true
	}
	for _, ps := range s.m.sessions {
		s.durable.gone[ps.id] = true
	}
	for _, turn := range s.turns {
		turn.ended = true
	}
	s.subs = nil
	if s.resources {
		s.resources = false
		s.ensureResources(t)
	}
}

// checkRestarted checks what a restart promises beyond the model's Check:
// the credentials it revoked show reason (or expired, if they were past
// their expiry); no other token changed its liveness; the instances are
// back by themselves, and registering one again with its spec is nil.
func (s *lifecycleMachine) checkRestarted(t *rapid.T, call string, before map[string]bool, revoked []*modelCred, reason string) {
	for _, c := range revoked {
		want := reason
		if c.revokedExpired {
			want = "expired"
		}
		i := slices.IndexFunc(s.rt.Credentials(c.thread), func(ci mcpruntime.CredentialInfo) bool { return ci.ID == c.id })
		if i < 0 {
			t.Fatalf("%s: no row of %s (%s)", call, c.id, c.describe())
		}
		if ci := s.rt.Credentials(c.thread)[i]; ci.State != "revoked" || ci.RevokeReason != want || !ci.Revoked.Equal(s.m.now) {
			t.Fatalf("%s: %s (%s) is %s, reason %q, at %v; want revoked, reason %q, at %v", call, c.id, c.describe(), ci.State, ci.RevokeReason, ci.Revoked, want, s.m.now)
		}
	}
	s.frame(t, call, before, func(c *modelCred) bool { return c.kind == kindProvider })
	for _, inst := range testInstances {
		info, err := s.rt.Instance(inst.id)
		if err != nil {
			t.Fatalf("%s: Instance(%s) = %v", call, inst.id, err)
		}
		if diff := cmp.Diff(inst.caps, info.Capabilities, cmpOpts); diff != "" {
			t.Fatalf("%s: Instance(%s) capabilities (-want +got):\n%s", call, inst.id, diff)
		}
		if rapid.IntRange(0, 3).Draw(t, "registerAgain") == 0 {
			if err := s.rt.RegisterInstance(s.ctx, inst.id, instanceSpec(inst.caps, inst.config)); err != nil {
				t.Fatalf("%s: RegisterInstance(%s) again with its spec = %v, want nil", call, inst.id, err)
			}
		}
	}
}
