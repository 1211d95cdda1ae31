package oauth

import (
	"context"
	"time"
)

// State is what the authorization server keeps that any node of several
// may need at any step of a sign-in (SPEC §5c, §5d.9): the pairing codes,
// the authorization codes (and the spent ones remembered), the wrong-code
// budgets and the confirmed redirect URIs. Each method is one atomic
// check-and-change: of two servers sharing a State that race to take one
// pairing code or spend one authorization code, exactly one does.
//
// [NewMemoryState] is one process's (the default); package cluster keeps
// one in etcd (internal/oauthetcd), shared by every node. The consent
// pages are not in it: each node keeps its own, and a consent form posted
// to another node goes to the page's ([Config.Node], [Config.Forward]).
//
// Keys are hashes: a State never sees a code, a pairing code or a client
// id in clear, except a code's client id and name (public) in [Code].
type State interface {
	// AddPairing stores a pairing code by its hash, unless
	// Limits.MaxPairingCodes unexpired ones are outstanding
	// (fault.ErrTooManyPairingCodes).
	AddPairing(ctx context.Context, hash string, p Pairing, now time.Time) error
	// TakePairing spends the pairing code of hash and returns the access it
	// grants; ok is false when it is unknown, spent or expired (an expired
	// one is spent all the same).
	TakePairing(ctx context.Context, hash string, now time.Time) (access string, ok bool, err error)

	// CodeRoom reports whether another authorization code may be added,
	// making room as SPEC §5c.9 says: entries past their time go, then,
	// when still full, the spent code that expired first.
	CodeRoom(ctx context.Context, now time.Time) (bool, error)
	// AddCode stores an authorization code by its hash.
	AddCode(ctx context.Context, hash string, c Code) error
	// SpendCode spends the code of hash and returns it as it was before
	// this call (found false: no such code) and whether this was its first
	// exchange. Presented again before its exchange recorded a grant, the
	// code is marked replayed (see CodeIssued); after, the grant is cleared
	// from the entry (the caller revokes it, and puts it back with
	// CodeIssued if it could not).
	SpendCode(ctx context.Context, hash string) (c Code, first, found bool, err error)
	// CodeIssued records grant as what the code's exchange issued and
	// reports whether the code was replayed meanwhile (the caller revokes
	// the grant).
	CodeIssued(ctx context.Context, hash, grant string) (replayed bool, err error)

	// BudgetOpen reports whether a consent submission of the client whose
	// id hashes to clientHash, from source (sourceKey's; "" unknown), may
	// be checked now: its client's, its source's and the server's
	// wrong-code buckets each hold a token.
	BudgetOpen(ctx context.Context, clientHash, source string, now time.Time) (bool, error)
	// BudgetFail spends one token of each of a wrong code's buckets.
	BudgetFail(ctx context.Context, clientHash, source string, now time.Time) error

	// Confirm confirms redirect for clientID (SPEC §5c.6), within
	// Limits.MaxConfirmedRedirects, the least recently used forgotten first.
	Confirm(ctx context.Context, clientID, redirect string) error
	// Confirmed reports whether redirect is confirmed for clientID, and
	// keeps it (it becomes the most recently used).
	Confirmed(ctx context.Context, clientID, redirect string) (bool, error)
}

// Limits are the bounds and budgets a State keeps (Config's, defaulted).
type Limits struct {
	MaxPairingCodes       int
	MaxCodes              int
	MaxConfirmedRedirects int
	// Wrong pairing codes a minute: of one client (per source, where
	// known), of one source, of the whole server.
	ClientFailuresPerMinute, SourceFailuresPerMinute, FailuresPerMinute int
}

// Pairing is an outstanding pairing code.
type Pairing struct {
	Access  string    `json:"access"`
	Expires time.Time `json:"expires"`
}

// Code is an authorization code waiting for its exchange, or spent and
// remembered, so that its replay revokes what its exchange issued (SPEC
// §5c.9).
type Code struct {
	ClientID   string    `json:"clientId"`
	ClientName string    `json:"clientName"`
	Redirect   string    `json:"redirect"`
	Challenge  string    `json:"challenge"`
	Resource   string    `json:"resource"`
	Access     string    `json:"access"`
	Expires    time.Time `json:"expires"`
	// Spent: its first exchange came; the entry stays until Expires +
	// SpentCodeKept (or until the table is full).
	Spent bool `json:"spent,omitempty"`
	// Grant is the grant its exchange issued ("" none, or not yet).
	Grant string `json:"grant,omitempty"`
	// Replayed: presented again before its exchange's grant was known, so
	// the exchange revokes what it issues.
	Replayed bool `json:"replayed,omitempty"`
}

// SpentCodeKept is how long after its expiry a spent code is remembered.
const SpentCodeKept = 10 * time.Minute

// KeptUntil is when the entry of c is dropped.
func (c *Code) KeptUntil() time.Time {
	if c.Spent {
		return c.Expires.Add(SpentCodeKept)
	}
	return c.Expires
}

// Spend is SpendCode's change to an entry, for every State: it returns
// the entry as it was and whether this is its first exchange, and changes
// c as the spend does.
func (c *Code) Spend() (was Code, first bool) {
	was, first = *c, !c.Spent
	c.Spent = true
	switch {
	case first:
	case c.Grant == "":
		c.Replayed = true
	default:
		c.Grant = "" // revoked by the caller: once is enough
	}
	return was, first
}

// client is the code's client as far as the token endpoint needs it.
func (c *Code) client() *Client { return &Client{ID: c.ClientID, Name: c.ClientName} }

// Bucket is one wrong-code token bucket; its zero value is full.
type Bucket struct {
	Spent float64   `json:"spent"` // tokens below capacity
	At    time.Time `json:"at"`
}

// Refill brings b to now at rate tokens a minute (also its capacity) and
// returns the tokens it has.
func (b *Bucket) Refill(rate float64, now time.Time) float64 {
	if now.After(b.At) {
		if !b.At.IsZero() {
			b.Spent = max(0, b.Spent-now.Sub(b.At).Minutes()*rate)
		}
		b.At = now
	}
	return rate - b.Spent
}

// Fail spends one token of b, refilled to now first.
func (b *Bucket) Fail(rate float64, now time.Time) {
	b.Refill(rate, now)
	b.Spent = min(rate, b.Spent+1)
}

// BudgetKeys are the buckets a submission draws on besides the server's:
// its client's (per source, where known) and, for a known source, the
// source's ("" none).
func BudgetKeys(clientHash, source string) (client, src string) {
	client = "c\x00" + clientHash + "\x00" + source
	if source != "" {
		src = "s\x00" + source
	}
	return client, src
}

// ConfirmedKey is the key of a confirmed redirect URI: a hash of the
// client id and the URI exactly as presented (a loopback one with its
// port), length-prefixed so that no two pairs share a key.
func ConfirmedKey(clientID, redirect string) [32]byte { return confirmedKey(clientID, redirect) }

// PairingHash is the key of a pairing code as typed (normalized first);
// ok is false when it cannot be one.
func PairingHash(typed string) (hash string, ok bool) {
	code := normalizePairing(typed)
	if len(code) != pairingChars {
		return "", false
	}
	return pairingHash(code), true
}

// memState is one process's State: the tables below, each under its own
// lock.
type memState struct {
	pairing   *pairings
	codes     *codes
	limiter   *failureBudgets
	confirmed *confirmedRedirects
}

// NewMemoryState is one process's State, in memory, bounded by l.
func NewMemoryState(l Limits) State {
	return &memState{
		pairing:   newPairings(l.MaxPairingCodes),
		codes:     newCodes(l.MaxCodes),
		limiter:   newFailureBudgets(l.ClientFailuresPerMinute, l.SourceFailuresPerMinute, l.FailuresPerMinute),
		confirmed: newConfirmed(l.MaxConfirmedRedirects),
	}
}

func (m *memState) AddPairing(_ context.Context, hash string, p Pairing, now time.Time) error {
	return m.pairing.add(hash, p, now)
}

func (m *memState) TakePairing(_ context.Context, hash string, now time.Time) (string, bool, error) {
	access, ok := m.pairing.take(hash, now)
	return access, ok, nil
}

func (m *memState) CodeRoom(_ context.Context, now time.Time) (bool, error) {
	return m.codes.room(now), nil
}

func (m *memState) AddCode(_ context.Context, hash string, c Code) error {
	m.codes.add(hash, &c)
	return nil
}

func (m *memState) SpendCode(_ context.Context, hash string) (Code, bool, bool, error) {
	c, first := m.codes.spend(hash)
	if c == nil {
		return Code{}, false, false, nil
	}
	return *c, first, true, nil
}

func (m *memState) CodeIssued(_ context.Context, hash, grant string) (bool, error) {
	return m.codes.issued(hash, grant), nil
}

func (m *memState) BudgetOpen(_ context.Context, clientHash, source string, now time.Time) (bool, error) {
	return m.limiter.open(clientHash, source, now), nil
}

func (m *memState) BudgetFail(_ context.Context, clientHash, source string, now time.Time) error {
	m.limiter.fail(clientHash, source, now)
	return nil
}

func (m *memState) Confirm(_ context.Context, clientID, redirect string) error {
	m.confirmed.add(clientID, redirect)
	return nil
}

func (m *memState) Confirmed(_ context.Context, clientID, redirect string) (bool, error) {
	return m.confirmed.has(clientID, redirect), nil
}
