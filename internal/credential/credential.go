// Package credential is the credential ledger: the only code that changes
// a row of the credentials table, and the one place that decides whether a
// credential, a namespace or a caller is live (SPEC §2, §3, §4).
//
// A row changes shape only here: minted (a provider credential of a
// (thread, instance) pair, or a client grant's token), refreshed by a turn
// start, revoked with a reason, deleted with its owner, pruned. The
// functions that write take the *memdb.Writer of the owning actor's
// transaction — the thread actor for provider credentials, the client-grant
// actor for its tokens — so the table keeps one writer per row and every
// change commits with the state change that caused it. The functions that
// read take a *memdb.Reader: authentication, the live-caller check of a
// mutation, and the liveness monitor's namespace check.
//
// Tokens leave this package once, as the return value of the call that
// minted them; only their SHA-256 is stored.
package credential

import (
	"crypto/subtle"
	"fmt"
	"slices"
	"time"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// Revocation reasons, recorded on a revoked row (memdb.Credential.RevokeReason).
const (
	ReasonReplaced   = "replaced"    // a new credential of the pair went into use
	ReasonRotated    = "rotated"     // rotate
	ReasonReleased   = "released"    // its provider session was released, idled or died
	ReasonOpenFailed = "open_failed" // the open that minted it failed
	ReasonArchived   = "archived"    // its thread was archived
	ReasonDeleted    = "deleted"     // its thread was deleted
	ReasonExpired    = "expired"     // its expiry passed before it was revoked
	ReasonShutdown   = "shutdown"    // the runtime closed
	ReasonRestart    = "restart"     // the runtime restarted on its state file, and its provider sessions died with the old process
	ReasonNodeLost   = "node_lost"   // its thread's home node left the cluster, and its provider sessions with it
	ReasonRefreshed  = "refreshed"   // a client grant's refresh revoked its earlier tokens
	// ReasonUsed: a refresh token was redeemed (and a new one issued in
	// its place). Presenting it again is reuse, which revokes the grant.
	ReasonUsed = "used"
	// ReasonRefreshReused: the grant was revoked because a spent refresh
	// token was presented again (SPEC §5c).
	ReasonRefreshReused = "refresh_reused"
	// ReasonAdmin: the host revoked the grant (RevokeClient).
	ReasonAdmin = "admin"
	// ReasonCodeReused: the grant was revoked because the authorization
	// code its exchange spent was presented again (SPEC §5c.9).
	ReasonCodeReused = "code_reused"
)

// MintProvider writes a new live credential of the pair (thread, instance)
// with caps, and returns its row and its token. The pair's earlier
// credentials are not touched: the caller revokes them (RevokePair) when
// the new one is in use. window > 0 sets the expiry to now + window; else
// it never expires by the clock.
func MintProvider(w *memdb.Writer, thread, instance string, caps []string, now time.Time, window time.Duration) (*memdb.Credential, string, error) {
	tok, hash := token.New()
	id := token.NewID("cred_")
	c := &memdb.Credential{
		ID:           id,
		TokenHash:    hash,
		Kind:         memdb.KindProvider,
		Namespace:    principal.ProviderNamespace(id),
		Thread:       thread,
		Instance:     instance,
		Capabilities: slices.Clone(caps),
		Issued:       now,
		LastLive:     now,
		State:        memdb.StateLive,
	}
	if window > 0 {
		c.Expires = now.Add(window)
	}
	if err := w.PutCredential(c); err != nil {
		return nil, "", err
	}
	return c, tok, nil
}

// IssueClient writes a new live access token of client grant grant with
// access, bound to audience ("" for none: see memdb.Credential.Audience),
// and returns its row and its token. ttl > 0 sets the expiry to now + ttl;
// else it never expires by the clock.
func IssueClient(w *memdb.Writer, grant, access, audience string, now time.Time, ttl time.Duration) (*memdb.Credential, string, error) {
	return issue(w, memdb.KindClient, "ctok_", token.ClientPrefix, grant, access, audience, now, ttl)
}

// StartFamily starts grant g's refresh family, for the OAuth client whose
// client_id hashes to oauthClient: g records the key's hash (generation 0:
// no token yet) and the key is returned, for IssueRefresh. A grant has one
// family: starting another is an error. The caller writes g (IssueRefresh
// does).
func StartFamily(g *memdb.ClientGrant, oauthClient string) (token.FamilyKey, error) {
	if g.Refresh.KeyHash != "" {
		return token.FamilyKey{}, fmt.Errorf("client grant %s has a refresh family already: %w", g.ID, fault.ErrInvalidArgument)
	}
	key := token.NewFamilyKey()
	g.Refresh = memdb.RefreshFamily{OAuthClient: oauthClient, KeyHash: token.FamilyKeyHash(key)}
	return key, nil
}

// IssueRefresh writes the next live refresh token of grant g's family
// (key is the family's: StartFamily's, or the one a redeemed token
// carried), bound to audience, with access, and g with its generation
// advanced; it returns the token's row and the token. ttl as IssueClient.
func IssueRefresh(w *memdb.Writer, g *memdb.ClientGrant, key token.FamilyKey, audience string, now time.Time, ttl time.Duration) (*memdb.Credential, string, error) {
	if g.Refresh.KeyHash == "" || !sameHash(token.FamilyKeyHash(key), g.Refresh.KeyHash) {
		return nil, "", fmt.Errorf("refresh token of %s: not its family's key", g.ID)
	}
	g.Refresh.Generation++
	tok, hash := token.NewRefresh(token.Refresh{Family: g.ID, Generation: g.Refresh.Generation, Key: key})
	c := &memdb.Credential{
		ID:          token.NewID("rtok_"),
		TokenHash:   hash,
		Kind:        memdb.KindRefresh,
		Namespace:   principal.ClientNamespace(g.ID),
		Client:      g.ID,
		Access:      g.Access,
		Audience:    audience,
		OAuthClient: g.Refresh.OAuthClient,
		Issued:      now,
		LastLive:    now,
		State:       memdb.StateLive,
	}
	if ttl > 0 {
		c.Expires = now.Add(ttl)
	}
	if err := w.PutCredential(c); err != nil {
		return nil, "", err
	}
	if err := w.PutClientGrant(g); err != nil {
		return nil, "", err
	}
	return c, tok, nil
}

// sameHash compares two hex hashes in constant time.
func sameHash(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// RecordClient writes a live access token of client grant grant whose
// token was minted elsewhere and verified (a JWT of the resource-server
// mode): its hash, access, audience and expiry as verified. A row with the
// same hash already there is returned as it is (two first uses at once).
func RecordClient(w *memdb.Writer, grant, access, audience, hash string, now, expires time.Time) (*memdb.Credential, error) {
	if c, err := w.CredentialByTokenHash(hash); err == nil {
		return c, nil
	}
	c := &memdb.Credential{
		ID: token.NewID("jtok_"), TokenHash: hash, Kind: memdb.KindClient, Namespace: principal.ClientNamespace(grant),
		Client: grant, Access: access, Audience: audience, Issued: now, LastLive: now, Expires: expires, State: memdb.StateLive,
	}
	return c, w.PutCredential(c)
}

func issue(w *memdb.Writer, kind, idPrefix, tokPrefix, grant, access, audience string, now time.Time, ttl time.Duration) (*memdb.Credential, string, error) {
	tok, hash := token.NewWith(tokPrefix)
	c := &memdb.Credential{
		ID:        token.NewID(idPrefix),
		TokenHash: hash,
		Kind:      kind,
		Namespace: principal.ClientNamespace(grant),
		Client:    grant,
		Access:    access,
		Audience:  audience,
		Issued:    now,
		LastLive:  now,
		State:     memdb.StateLive,
	}
	if ttl > 0 {
		c.Expires = now.Add(ttl)
	}
	if err := w.PutCredential(c); err != nil {
		return nil, "", err
	}
	return c, tok, nil
}

// RedeemRefresh spends refresh token tok of grant g, presented by the
// OAuth client whose client_id hashes to oauthClient: the row is revoked
// with ReasonUsed and returned with the family key tok carries, so the
// caller issues the next pair (IssueRefresh) in the same transaction.
//
// Reuse is judged over g's whole family (SPEC §5c.11): a token that
// carries the family's key and was spent before — its row revoked with
// ReasonUsed, or its row pruned and its generation older than the
// family's newest — is ErrRefreshReused (the caller revokes the grant).
// Anything else refused is ErrInvalidGrant and left as it is: a token not
// of g's family (unparsable, another family, another key: unknown, so
// that only a holder of one of g's tokens can make g revoked), of another
// client, revoked otherwise, expired, or of the newest generation with no
// row.
func RedeemRefresh(w *memdb.Writer, g *memdb.ClientGrant, tok, oauthClient string, now time.Time) (*memdb.Credential, token.FamilyKey, error) {
	invalid := fmt.Errorf("refresh token of %s: %w", g.ID, fault.ErrInvalidGrant)
	rt, ok := token.ParseRefresh(tok)
	if !ok || rt.Family != g.ID || g.Refresh.KeyHash == "" || !sameHash(token.FamilyKeyHash(rt.Key), g.Refresh.KeyHash) ||
		g.Refresh.OAuthClient != oauthClient {
		return nil, token.FamilyKey{}, invalid
	}
	c, err := w.CredentialByTokenHash(token.Hash(tok))
	switch {
	case err != nil && rt.Generation < g.Refresh.Generation:
		return nil, token.FamilyKey{}, fmt.Errorf("refresh token of %s, generation %d of %d, presented again: %w", g.ID, rt.Generation, g.Refresh.Generation, fault.ErrRefreshReused)
	case err != nil || c.Kind != memdb.KindRefresh || c.Client != g.ID || c.OAuthClient != oauthClient:
		return nil, token.FamilyKey{}, invalid
	case c.State != memdb.StateLive && c.RevokeReason == ReasonUsed:
		return nil, token.FamilyKey{}, fmt.Errorf("refresh token %s of %s presented again: %w", c.ID, g.ID, fault.ErrRefreshReused)
	case !c.LiveAt(now):
		return nil, token.FamilyKey{}, fmt.Errorf("refresh token %s of %s: %w", c.ID, g.ID, fault.ErrInvalidGrant)
	}
	if _, err := Revoke(w, c, ReasonUsed, now); err != nil {
		return nil, token.FamilyKey{}, err
	}
	return c, rt.Key, nil
}

// Revoke marks c revoked at now with reason, in place and in the store, and
// reports whether it did. A row already revoked keeps its reason; a row
// whose expiry has passed records ReasonExpired, whatever reason was asked.
// Rows read from the store are copies: changing c changes nothing else.
func Revoke(w *memdb.Writer, c *memdb.Credential, reason string, now time.Time) (bool, error) {
	if c.State != memdb.StateLive {
		return false, nil
	}
	if !c.LiveAt(now) {
		reason = ReasonExpired
	}
	c.State, c.RevokeReason, c.Revoked = memdb.StateRevoked, reason, now
	return true, w.PutCredential(c)
}

// RevokeAll revokes every row of rows still in state live (see Revoke) and
// returns their ids.
func RevokeAll(w *memdb.Writer, rows []*memdb.Credential, reason string, now time.Time) ([]string, error) {
	var revoked []string
	for _, c := range rows {
		ok, err := Revoke(w, c, reason, now)
		if err != nil {
			return revoked, err
		}
		if ok {
			revoked = append(revoked, c.ID)
		}
	}
	return revoked, nil
}

// RevokeThread revokes every credential of thread, across all instances,
// and returns how many it revoked.
func RevokeThread(w *memdb.Writer, thread, reason string, now time.Time) (int, error) {
	rows, err := w.CredentialsByThread(thread)
	if err != nil {
		return 0, err
	}
	revoked, err := RevokeAll(w, rows, reason, now)
	return len(revoked), err
}

// RevokePair revokes the credentials of the pair (thread, instance) other
// than keep, and returns their ids. No credential of another pair is
// touched (SPEC §6.4).
func RevokePair(w *memdb.Writer, thread, instance, keep, reason string, now time.Time) ([]string, error) {
	rows, err := w.CredentialsByThreadInstance(thread, instance)
	if err != nil {
		return nil, err
	}
	rows = slices.DeleteFunc(rows, func(c *memdb.Credential) bool { return c.ID == keep })
	return RevokeAll(w, rows, reason, now)
}

// RevokeExpired revokes, with ReasonExpired, the rows still in state live
// whose expiry has passed, so a listing shows them for what they are.
func RevokeExpired(w *memdb.Writer, rows []*memdb.Credential, now time.Time) error {
	for _, c := range rows {
		if c.State == memdb.StateLive && !c.LiveAt(now) {
			if _, err := Revoke(w, c, ReasonExpired, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// Touch slides the expiry of every live credential of thread to now +
// window (a turn started) and returns how many it refreshed. An expired
// credential stays expired.
func Touch(w *memdb.Writer, thread string, now time.Time, window time.Duration) (int, error) {
	rows, err := w.CredentialsByThread(thread)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range rows {
		if !c.LiveAt(now) {
			continue
		}
		c.LastLive = now
		if window > 0 {
			c.Expires = now.Add(window)
		}
		if err := w.PutCredential(c); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Prune removes the oldest revoked rows of rows beyond keep: the rows of
// one thread or one grant, kept for inspection.
func Prune(w *memdb.Writer, rows []*memdb.Credential, keep int) error {
	return w.PruneRevoked(rows, keep)
}

// Delete removes every row of rows (its owner is deleted: a removed token
// fails like a revoked one) and returns how many were live at now.
func Delete(w *memdb.Writer, rows []*memdb.Credential, now time.Time) (int, error) {
	live := 0
	for _, c := range rows {
		if c.LiveAt(now) {
			live++
		}
		if err := w.DeleteCredential(c.ID); err != nil {
			return live, err
		}
	}
	return live, nil
}

// Live reports whether the credential with id authenticates at now and,
// if it does, until when (zero: no expiry).
func Live(r *memdb.Reader, id string, now time.Time) (bool, time.Time) {
	c, err := r.Credential(id)
	if err != nil || !c.LiveAt(now) {
		return false, time.Time{}
	}
	return true, c.Expires
}

// NamespaceLive reports whether namespace has a live credential at now and
// when the last one expires (zero: never). A provider namespace is one
// credential; a client namespace is every access token of its grant (a
// refresh token authenticates nothing, so it keeps nothing live).
func NamespaceLive(r *memdb.Reader, namespace string, now time.Time) (bool, time.Time) {
	kind, id, ok := principal.ParseNamespace(namespace)
	if !ok {
		return false, time.Time{}
	}
	if kind == principal.KindProvider {
		return Live(r, id, now)
	}
	live, forever, last := false, false, time.Time{}
	_ = r.EachCredentialViewByNamespace(namespace, func(c *memdb.Credential) bool {
		if c.Kind == memdb.KindRefresh || !c.LiveAt(now) {
			return true
		}
		if c.Expires.IsZero() {
			forever = true
			return false
		}
		live = true
		if c.Expires.After(last) {
			last = c.Expires
		}
		return true
	})
	if forever {
		return true, time.Time{}
	}
	return live, last
}

// CheckLive decides whether caller is a live caller at now (SPEC §4.1):
// from the store, not from what the caller claims. A provider credential is
// live while it authenticates and its thread is active with an active run
// of the credential's instance; a client token while it authenticates and
// its grant is read-write. Inside a write transaction (pass &w.Reader) the
// answer holds until the commit. The errors match ErrNotLive or
// ErrReadOnly.
func CheckLive(r *memdb.Reader, caller principal.Principal, now time.Time) error {
	cred, err := r.Credential(caller.CredentialID)
	if err != nil || !cred.LiveAt(now) {
		return fmt.Errorf("credential %s: %w", caller.CredentialID, fault.ErrNotLive)
	}
	switch cred.Kind {
	case memdb.KindClient:
		if cred.Access != memdb.AccessReadWrite {
			return fmt.Errorf("client %s: %w", cred.Client, fault.ErrReadOnly)
		}
		return nil
	case memdb.KindProvider:
		own, err := r.Thread(cred.Thread)
		if err != nil || own.Status != memdb.ThreadActive || own.Run == nil || own.Run.Instance != cred.Instance {
			return fmt.Errorf("caller (%s, %s): %w", cred.Thread, cred.Instance, fault.ErrNotLive)
		}
		return nil
	}
	return fmt.Errorf("credential kind %q: %w", cred.Kind, fault.ErrNotLive)
}

// Authentication failure reasons, in AuthError.Reason.
const (
	AuthMalformed = "malformed" // not shaped like a token this runtime mints
	AuthUnknown   = "unknown"   // no credential has this token
	AuthRevoked   = "revoked"   // revoked for any reason but its expiry
	AuthExpired   = "expired"   // past its expiry, or revoked because it was
)

// AuthError is a failed authentication. It matches fault.ErrUnauthenticated.
type AuthError struct {
	Reason string
}

func (e *AuthError) Error() string { return "unauthenticated: " + e.Reason + " token" }

// AuthReason returns Reason, for the MCP endpoint's metrics.
func (e *AuthError) AuthReason() string { return e.Reason }

// Is makes errors.Is(err, fault.ErrUnauthenticated) true.
func (e *AuthError) Is(target error) bool { return target == fault.ErrUnauthenticated }

// Authenticate resolves a bearer token to its principal at now: a shape
// check, one hash, one lookup by hash, and the liveness of the row. A
// failure is an *AuthError. A refresh token is malformed here: it never
// authenticates a request.
func Authenticate(r *memdb.Reader, tok string, now time.Time) (principal.Principal, error) {
	if !token.Valid(tok) {
		return principal.Principal{}, &AuthError{Reason: AuthMalformed}
	}
	return AuthenticateHash(r, token.Hash(tok), now)
}

// AuthenticateHash is Authenticate of the token whose hash is hash, for a
// token whose shape was checked by its own kind's rules (a JWT of the
// resource-server mode).
func AuthenticateHash(r *memdb.Reader, hash string, now time.Time) (principal.Principal, error) {
	c, err := r.CredentialViewByTokenHash(hash) // read only: Principal copies what it keeps
	if err != nil {
		c = nil
	}
	return AuthenticateRow(c, now)
}

// AuthenticateRow is Authenticate's judgement of the row a token's hash
// found (nil: none), read by the caller — from the store's token index
// (memdb.Store.CredentialForToken) on the request path. c is read only.
func AuthenticateRow(c *memdb.Credential, now time.Time) (principal.Principal, error) {
	if reason := deadReason(c, now); reason != "" {
		return principal.Principal{}, &AuthError{Reason: reason}
	}
	return Principal(c), nil
}

// Dead returns why the credential with id no longer authenticates at now
// (AuthUnknown: removed; AuthRevoked; AuthExpired), or "" while it does:
// Authenticate's judgement of a row, for a principal authenticated before.
func Dead(r *memdb.Reader, id string, now time.Time) string {
	c, err := r.Credential(id)
	if err != nil {
		c = nil
	}
	return deadReason(c, now)
}

// deadReason is the one judgement of whether row c authenticates at now:
// "" if it does, else the AuthError reason. A nil row is unknown; a
// refresh token never authenticates a request.
func deadReason(c *memdb.Credential, now time.Time) string {
	switch {
	case c == nil || c.Kind == memdb.KindRefresh:
		return AuthUnknown
	case c.State != memdb.StateLive && c.RevokeReason == ReasonExpired:
		return AuthExpired
	case c.State != memdb.StateLive:
		return AuthRevoked
	case !c.LiveAt(now):
		return AuthExpired
	}
	return ""
}

// Principal is the principal row c authenticates as.
func Principal(c *memdb.Credential) principal.Principal {
	return principal.Principal{
		Kind:         c.Kind,
		Namespace:    c.Namespace,
		CredentialID: c.ID,
		Thread:       c.Thread,
		Instance:     c.Instance,
		Client:       c.Client,
		Access:       c.Access,
		Audience:     c.Audience,
		Capabilities: slices.Clone(c.Capabilities),
		Expires:      c.Expires,
	}
}
