package client_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/names"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type env struct {
	t     *testing.T
	sys   *actor.ActorSystem
	root  *actor.RootContext
	store *memdb.Store
	clock *actortest.Clock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	store := actortest.NewStore(t)
	sys := actortest.NewSystem(t)
	return &env{t: t, sys: sys, root: sys.Root, store: store, clock: actortest.NewClock(actortest.T0)}
}

type grantOpts struct {
	access      string
	ttl         time.Duration
	refreshTTL  time.Duration
	revokedKept int
	events      func(credential.Event)
}

// spawn starts the actor of grant id.
func (e *env) spawn(id string, o grantOpts) *actor.PID {
	e.t.Helper()
	if o.access == "" {
		o.access = memdb.AccessReadWrite
	}
	props := client.Props(client.Config{
		ID:          id,
		Label:       "label of " + id,
		Access:      o.access,
		Store:       e.store,
		Now:         e.clock.Now,
		TTL:         o.ttl,
		RefreshTTL:  o.refreshTTL,
		RevokedKept: o.revokedKept,
		Via:         "oauth",
		Events:      o.events,
		Logger:      slog.New(slog.DiscardHandler),
	})
	pid, err := e.root.SpawnNamed(props, names.Client(id))
	if err != nil {
		e.t.Fatalf("spawn client/%s: %v", id, err)
	}
	actortest.StopAtEnd(e.t, e.root, pid)
	e.grant(pid) // its record is written
	return pid
}

func (e *env) grant(pid *actor.PID) memdb.ClientGrant {
	e.t.Helper()
	info := actortest.Ask[*client.GrantInfo](e.t, e.root, pid, &client.GetGrant{})
	if info.Err() != nil {
		e.t.Fatalf("GetGrant(%s) = %v", pid.Id, info.Err())
	}
	return info.Grant
}

func (e *env) issue(pid *actor.PID, revokePrevious bool) *client.TokenIssued {
	e.t.Helper()
	res := actortest.Ask[*client.TokenIssued](e.t, e.root, pid, &client.IssueToken{RevokePrevious: revokePrevious})
	if res.Err() != nil {
		e.t.Fatalf("IssueToken(%v) = %v", revokePrevious, res.Err())
	}
	return res
}

func (e *env) cred(id string) *memdb.Credential {
	e.t.Helper()
	c, err := e.store.Read().Credential(id)
	if err != nil {
		e.t.Fatalf("Credential(%s) = %v", id, err)
	}
	return c
}

func (e *env) tokens(grant string) []*memdb.Credential {
	e.t.Helper()
	cs, err := e.store.Read().CredentialsByNamespace(client.Namespace(grant))
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

func sendSystem(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, msg any) {
	t.Helper()
	proc, ok := sys.ProcessRegistry.Get(pid)
	if !ok {
		t.Fatalf("no process %s", pid.Id)
	}
	proc.SendSystemMessage(pid, msg)
}

// eventually polls cond until it holds; only for effects that are
// asynchronous by design (an actor stopping).
var eventually = actortest.Eventually

func errOf(res any) error {
	switch r := res.(type) {
	case *client.TokenIssued:
		return r.Err()
	case *client.Revoked:
		return r.Err()
	case *client.GrantInfo:
		return r.Err()
	}
	return fmt.Errorf("unexpected reply %T", res)
}
