package session

import (
	"errors"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/actortest"
)

// TestTableCommitAfterCloseAll: a session reserved before CloseAll and
// committed after it is one CloseAll did not return, so Commit says so —
// its caller must end it — while one committed before is returned by
// CloseAll as usual.
func TestTableCommitAfterCloseAll(t *testing.T) {
	tb := NewTable(10, 10)
	owner := Owner{Namespace: "cred:c1", Credential: "c1"}
	early, _, err := tb.Reserve("mcps_early", owner, actortest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if !tb.Commit(early, actor.NewPID("local", "early")) {
		t.Fatal("Commit before CloseAll = false, want true")
	}
	late, _, err := tb.Reserve("mcps_late", owner, actortest.T0)
	if err != nil {
		t.Fatal(err)
	}
	closed := tb.CloseAll()
	if len(closed) != 1 || closed[0] != early {
		t.Fatalf("CloseAll = %v, want only the committed session", closed)
	}
	if tb.Commit(late, actor.NewPID("local", "late")) {
		t.Error("Commit after CloseAll = true, want false: CloseAll did not return it")
	}
	if _, _, err := tb.Reserve("mcps_after", owner, actortest.T0); !errors.Is(err, ErrClosing) {
		t.Errorf("Reserve after CloseAll = %v, want ErrClosing", err)
	}
	// The late session is live until its actor ends it, like the others.
	tb.Release(late)
	tb.Release(early)
	if n := tb.Count(); n != 0 {
		t.Errorf("Count() = %d after both ended, want 0", n)
	}
}
