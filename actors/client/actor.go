package client

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/commit"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// Config configures one client-grant actor.
type Config struct {
	ID     string
	Home   string // the node the actor runs on, recorded in the grant (several nodes); "" on one node
	Label  string
	Access string // memdb.AccessReadOnly or memdb.AccessReadWrite
	Store  *memdb.Store
	Now    func() time.Time
	// TTL is how long a token authenticates after it is issued. Zero or
	// negative: forever.
	TTL time.Duration
	// RefreshTTL is how long a refresh token may be redeemed after it is
	// issued. Zero or negative: forever.
	RefreshTTL time.Duration
	// RevokedKept bounds the revoked or expired token rows kept per grant.
	RevokedKept int
	// Via is how the grant came ("admin", "oauth", "jwt"), for the audit
	// trail.
	Via string
	// Events receives the grant's audit records (issued, refreshed,
	// rotated, revoked), from the actor's goroutine: it must not block.
	// Nil: none.
	Events func(credential.Event)
	Logger *slog.Logger
}

// Namespace returns the namespace shared by every token of grant id.
func Namespace(id string) string { return principal.ClientNamespace(id) }

// Props returns the props of a client-grant actor.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		a := &grantActor{cfg: cfg, writer: commit.Writer{Store: cfg.Store}}
		a.behavior.Become(a.live)
		return a
	})
}

type grantActor struct {
	cfg      Config
	behavior actor.Behavior // live, then revoked
	// writer commits the grant's writes off Receive, holding its later
	// messages until each commit answered (internal/commit).
	writer commit.Writer
}

func (a *grantActor) Receive(ctx actor.Context) { a.behavior.Receive(ctx) }

// live is the grant's behaviour until it is revoked.
func (a *grantActor) live(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *IssueToken:
		if deadline.Passed(msg.Or(time.Minute)) {
			ctx.Respond(msg.fail(fault.New(fault.Timeout, "issue a token of %s: deadline passed: %v", a.cfg.ID, fault.ErrTimeout)))
			return
		}
		reply := ctx.Sender()
		a.issue(ctx, msg, nil, func(res *TokenIssued, err error) {
			res.Fault = fault.From(err)
			sendTo(ctx, reply, res)
		})
	case *RedeemRefresh:
		if deadline.Passed(msg.Or(time.Minute)) {
			ctx.Respond(msg.fail(fault.New(fault.Timeout, "refresh a token of %s: deadline passed: %v", a.cfg.ID, fault.ErrTimeout)))
			return
		}
		reply := ctx.Sender()
		a.redeem(ctx, msg, func(res *TokenIssued, err error) {
			if !errors.Is(err, fault.ErrRefreshReused) {
				res.Fault = fault.From(err)
				sendTo(ctx, reply, res)
				return
			}
			// Reuse means the token leaked: the whole grant goes, its
			// sessions end and its streams close (SPEC §5c).
			a.revoke(ctx, credential.ReasonRefreshReused, func(_ int, rerr error) {
				if rerr != nil {
					err = rerr
				} else {
					a.stop(ctx)
				}
				res.Fault = fault.From(err)
				sendTo(ctx, reply, res)
			})
		})
	case *RecordToken:
		if deadline.Passed(msg.Or(time.Minute)) {
			ctx.Respond(msg.fail(fault.New(fault.Timeout, "record a token of %s: deadline passed: %v", a.cfg.ID, fault.ErrTimeout)))
			return
		}
		reply := ctx.Sender()
		a.record(ctx, msg, func(res *TokenIssued, err error) {
			res.Fault = fault.From(err)
			sendTo(ctx, reply, res)
		})
	case *Revoke:
		reason := msg.Reason
		if reason == "" {
			reason = credential.ReasonAdmin
		}
		reply := ctx.Sender()
		a.revoke(ctx, reason, func(n int, err error) {
			sendTo(ctx, reply, &Revoked{Tokens: n, Fault: fault.From(err)})
			if err == nil {
				a.stop(ctx)
			}
		})
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

// stop ends the actor once its grant is revoked. Poison, not Stop:
// messages already queued are answered (with fault.ErrUnknownClient) before the actor
// goes.
func (a *grantActor) stop(ctx actor.Context) {
	a.behavior.Become(a.revoked)
	ctx.Poison(ctx.Self())
}

// event sends an audit record of the grant to Config.Events.
func (a *grantActor) event(kind, credentialID, reason string) {
	if a.cfg.Events != nil {
		a.cfg.Events(credential.Event{
			Kind: kind, Client: a.cfg.ID, Credential: credentialID, Access: a.cfg.Access,
			Via: a.cfg.Via, Reason: reason, At: a.cfg.Now(),
		})
	}
}

// revoked is the grant's behaviour once revoked, until the actor is gone.
func (a *grantActor) revoked(ctx actor.Context) {
	if msg, ok := ctx.Message().(Message); ok {
		ctx.Respond(msg.fail(fault.New(fault.UnknownClient, "client %s: %v", a.cfg.ID, fault.ErrUnknownClient)))
	}
}

func (a *grantActor) start(ctx actor.Context) {
	a.writer.Write(ctx, func(w *memdb.Writer) error {
		if _, err := w.ClientGrant(a.cfg.ID); err == nil {
			return nil // a restart
		}
		return w.PutClientGrant(&memdb.ClientGrant{
			ID: a.cfg.ID, Home: a.cfg.Home, Label: a.cfg.Label, Access: a.cfg.Access,
			State: memdb.StateLive, Created: a.cfg.Now(), Via: a.cfg.Via,
		})
	}, func(err error) {
		if err != nil {
			a.cfg.Logger.Error("write client grant", "client", a.cfg.ID, "err", err)
		}
	})
}

// sendTo sends res to reply, the sender of the message being answered,
// captured when it was current: a write's continuation may run while
// another message is current. A message sent without a sender gets no
// answer.
func sendTo(ctx actor.Context, reply *actor.PID, res any) {
	if reply != nil {
		ctx.Send(reply, res)
	}
}

// issue mints the grant's next access token (and, for an OAuth client, a
// refresh token) in one transaction. With redeem, the transaction first
// spends the refresh token it presents, and the new refresh token is the
// next of that family, bound to the spent one's audience.
//
// then gets the outcome on the actor's turn, once the write committed.
func (a *grantActor) issue(ctx actor.Context, msg *IssueToken, redeem *RedeemRefresh, then func(*TokenIssued, error)) {
	now := a.cfg.Now()
	res := &TokenIssued{Access: a.cfg.Access}
	var refreshID string
	earlier := false // the grant had an access token before: this is a refresh
	a.writer.Write(ctx, func(w *memdb.Writer) error {
		audience := msg.Audience
		var g *memdb.ClientGrant // the grant, when a refresh token is minted
		var key token.FamilyKey  // its family's key
		switch {
		case redeem != nil:
			var err error
			if g, err = w.ClientGrant(a.cfg.ID); err != nil {
				return err
			}
			spent, k, err := credential.RedeemRefresh(w, g, redeem.Token, redeem.OAuthClient, now)
			if err != nil {
				return err
			}
			audience, key = spent.Audience, k
		case msg.OAuthClient != "":
			var err error
			if g, err = w.ClientGrant(a.cfg.ID); err != nil {
				return err
			}
			if key, err = credential.StartFamily(g, msg.OAuthClient); err != nil {
				return err
			}
		}
		olds, err := w.CredentialsByNamespace(Namespace(a.cfg.ID))
		if err != nil {
			return err
		}
		earlier = slices.ContainsFunc(olds, func(c *memdb.Credential) bool { return c.Kind == memdb.KindClient })
		// Expired tokens are marked so in the same go; with revokePrevious
		// every earlier token goes (an expired one still records expired).
		if msg.RevokePrevious {
			_, err = credential.RevokeAll(w, olds, credential.ReasonRefreshed, now)
		} else {
			err = credential.RevokeExpired(w, olds, now)
		}
		if err != nil {
			return err
		}
		c, t, err := credential.IssueClient(w, a.cfg.ID, a.cfg.Access, audience, now, a.cfg.TTL)
		if err != nil {
			return err
		}
		res.Token, res.CredentialID, res.Expires = t, c.ID, c.Expires
		if g != nil {
			rc, rt, err := credential.IssueRefresh(w, g, key, audience, now, a.cfg.RefreshTTL)
			if err != nil {
				return err
			}
			res.RefreshToken, refreshID = rt, rc.ID
		}
		return a.prune(w)
	}, func(err error) {
		if err != nil {
			then(&TokenIssued{}, err)
			return
		}
		kind := credential.EventIssued
		if redeem != nil || earlier {
			kind = credential.EventRefreshed
		}
		a.event(kind, res.CredentialID, "")
		if refreshID != "" && redeem != nil {
			a.event(credential.EventRotated, refreshID, "")
		}
		then(res, nil)
	})
}

// record writes a verified token's row, marking the grant's expired rows
// and pruning, in one transaction.
func (a *grantActor) record(ctx actor.Context, msg *RecordToken, then func(*TokenIssued, error)) {
	now := a.cfg.Now()
	res := &TokenIssued{Access: msg.Access, Expires: msg.Expires}
	fresh := false
	a.writer.Write(ctx, func(w *memdb.Writer) error {
		olds, err := w.CredentialsByNamespace(Namespace(a.cfg.ID))
		if err != nil {
			return err
		}
		if err := credential.RevokeExpired(w, olds, now); err != nil {
			return err
		}
		fresh = !slices.ContainsFunc(olds, func(c *memdb.Credential) bool { return c.TokenHash == msg.TokenHash })
		c, err := credential.RecordClient(w, a.cfg.ID, msg.Access, msg.Audience, msg.TokenHash, now, msg.Expires)
		if err != nil {
			return err
		}
		res.CredentialID = c.ID
		if fresh && msg.MaxLive > 0 {
			if err := evictOldest(w, olds, c.ID, msg.MaxLive-1, now); err != nil {
				return err
			}
		}
		return a.prune(w)
	}, func(err error) {
		if err != nil {
			then(&TokenIssued{}, err)
			return
		}
		if fresh {
			a.event(credential.EventIssued, res.CredentialID, "")
		}
		then(res, nil)
	})
}

// evictOldest removes the oldest live access tokens of rows (by issue
// time, then id), but keep, until at most limit are live besides keep. A
// removed token is unknown, not revoked: a JWT presented again is
// verified again.
func evictOldest(w *memdb.Writer, rows []*memdb.Credential, keep string, limit int, now time.Time) error {
	live := slices.DeleteFunc(slices.Clone(rows), func(c *memdb.Credential) bool {
		return c.ID == keep || c.Kind != memdb.KindClient || c.State != memdb.StateLive || !c.LiveAt(now)
	})
	if len(live) <= limit {
		return nil
	}
	slices.SortFunc(live, func(x, y *memdb.Credential) int {
		if c := x.Issued.Compare(y.Issued); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	_, err := credential.Delete(w, live[:len(live)-limit], now)
	return err
}

// redeem spends a refresh token and issues the next pair, in one
// transaction: either both happen or neither.
func (a *grantActor) redeem(ctx actor.Context, msg *RedeemRefresh, then func(*TokenIssued, error)) {
	a.issue(ctx, &IssueToken{}, msg, then)
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
func (a *grantActor) revoke(ctx actor.Context, reason string, then func(n int, err error)) {
	n := 0
	now := a.cfg.Now()
	a.writer.Write(ctx, func(w *memdb.Writer) error {
		creds, err := w.CredentialsByNamespace(Namespace(a.cfg.ID))
		if err != nil {
			return err
		}
		if n, err = credential.Delete(w, creds, now); err != nil {
			return err
		}
		return w.DeleteClientGrant(a.cfg.ID)
	}, func(err error) {
		if err != nil {
			then(0, err)
			return
		}
		a.event(credential.EventRevoked, "", reason)
		then(n, nil)
	})
}
