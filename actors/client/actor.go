package client

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// Config configures one client-grant actor.
type Config struct {
	ID     string
	Label  string
	Access string // memdb.AccessReadOnly or memdb.AccessReadWrite
	Store  *memdb.Store
	Now    func() time.Time
	// TTL is how long a token authenticates after it is issued. Zero or
	// negative: forever.
	TTL time.Duration
	// RevokedKept bounds the revoked or expired token rows kept per grant.
	RevokedKept int
	Logger      *slog.Logger
}

// Namespace returns the namespace shared by every token of grant id.
func Namespace(id string) string { return principal.ClientNamespace(id) }

// Props returns the props of a client-grant actor.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		a := &grantActor{cfg: cfg}
		a.behavior.Become(a.live)
		return a
	})
}

type grantActor struct {
	cfg      Config
	behavior actor.Behavior // live, then revoked
}

func (a *grantActor) Receive(ctx actor.Context) { a.behavior.Receive(ctx) }

// live is the grant's behaviour until it is revoked.
func (a *grantActor) live(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start()
	case *IssueToken:
		if deadline.Passed(msg.Or(time.Minute)) {
			ctx.Respond(msg.fail(fault.New(fault.Timeout, "issue a token of %s: deadline passed: %v", a.cfg.ID, fault.ErrTimeout)))
			return
		}
		tok, id, err := a.issue(msg.RevokePrevious)
		ctx.Respond(&TokenIssued{Token: tok, CredentialID: id, Fault: fault.From(err)})
	case *Revoke:
		n, err := a.revoke()
		ctx.Respond(&Revoked{Tokens: n, Fault: fault.From(err)})
		if err == nil {
			a.behavior.Become(a.revoked)
			// Poison, not Stop: messages already queued are answered (with
			// ErrNotFound) before the actor goes.
			ctx.Poison(ctx.Self())
		}
	case *GetGrant:
		g, err := a.cfg.Store.Read().ClientGrant(a.cfg.ID)
		res := &GrantInfo{Fault: fault.From(err)}
		if err == nil {
			res.Grant = *g
		}
		ctx.Respond(res)
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("client actor: unexpected message", "client", a.cfg.ID, "type", fmt.Sprintf("%T", msg))
	}
}

// revoked is the grant's behaviour once revoked, until the actor is gone.
func (a *grantActor) revoked(ctx actor.Context) {
	if msg, ok := ctx.Message().(Message); ok {
		ctx.Respond(msg.fail(fault.New(fault.UnknownClient, "client %s: %v", a.cfg.ID, ErrNotFound)))
	}
}

func (a *grantActor) start() {
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		if _, err := w.ClientGrant(a.cfg.ID); err == nil {
			return nil // a restart
		}
		return w.PutClientGrant(&memdb.ClientGrant{
			ID: a.cfg.ID, Label: a.cfg.Label, Access: a.cfg.Access,
			State: memdb.StateLive, Created: a.cfg.Now(),
		})
	})
	if err != nil {
		a.cfg.Logger.Error("write client grant", "client", a.cfg.ID, "err", err)
	}
}

func (a *grantActor) issue(revokePrevious bool) (tok, id string, err error) {
	now := a.cfg.Now()
	err = a.cfg.Store.Write(func(w *memdb.Writer) error {
		olds, err := w.CredentialsByNamespace(Namespace(a.cfg.ID))
		if err != nil {
			return err
		}
		// Expired tokens are marked so in the same go; with revokePrevious
		// every earlier token goes (an expired one still records expired).
		if revokePrevious {
			_, err = credential.RevokeAll(w, olds, credential.ReasonRefreshed, now)
		} else {
			err = credential.RevokeExpired(w, olds, now)
		}
		if err != nil {
			return err
		}
		c, t, err := credential.IssueClient(w, a.cfg.ID, a.cfg.Access, now, a.cfg.TTL)
		if err != nil {
			return err
		}
		tok, id = t, c.ID
		return a.prune(w)
	})
	if err != nil {
		return "", "", err
	}
	return tok, id, nil
}

// prune drops the oldest revoked token rows beyond RevokedKept.
func (a *grantActor) prune(w *memdb.Writer) error {
	creds, err := w.CredentialsByNamespace(Namespace(a.cfg.ID))
	if err != nil {
		return err
	}
	return credential.Prune(w, creds, a.cfg.RevokedKept)
}

// revoke removes every token row and the grant in one transaction: a
// removed token authenticates exactly like a revoked one (not at all).
func (a *grantActor) revoke() (int, error) {
	n := 0
	now := a.cfg.Now()
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		creds, err := w.CredentialsByNamespace(Namespace(a.cfg.ID))
		if err != nil {
			return err
		}
		if n, err = credential.Delete(w, creds, now); err != nil {
			return err
		}
		return w.DeleteClientGrant(a.cfg.ID)
	})
	return n, err
}
