package mcpruntime

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/names"
)

// HoldThread suspends the mailbox of thread's actor until the returned
// function resumes it: what the thread is asked meanwhile waits, and is
// answered in order once it resumes, as a busy thread would answer. System
// messages still run. For testing.
func HoldThread(t testing.TB, r *Runtime, thread string) (resume func()) {
	t.Helper()
	pid := r.system.NewLocalPID(names.Thread(thread))
	proc, ok := r.system.ProcessRegistry.Get(pid)
	if !ok {
		t.Fatalf("hold %s: no such actor", pid.Id)
	}
	proc.SendSystemMessage(pid, &actor.SuspendMailbox{})
	return func() { proc.SendSystemMessage(pid, &actor.ResumeMailbox{}) }
}

// StoredAuthenticate is Authenticate's judgement of tok by the store alone:
// unlike Authenticate it does not refuse everything once Shutdown began,
// so it tells whether the token's credential itself was revoked. For
// testing.
func StoredAuthenticate(r *Runtime, tok string) error {
	_, err := credential.Authenticate(r.store.Read(), tok, r.cfg.Now())
	return err
}
