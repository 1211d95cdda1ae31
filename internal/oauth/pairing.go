package oauth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/internal/fault"
)

// Audit kinds of the refusals this package records.
const (
	kindAuthFailed    = "authorization_failed"
	kindPairingFailed = "pairing_failed"
)

// Access levels a pairing code grants.
const (
	AccessReadOnly  = "read-only"
	AccessReadWrite = "read-write"
)

// pairingAlphabet is Crockford's base32: no I, L, O or U, so that a code
// read aloud or typed is not mistaken; normalize maps the look-alikes back.
const pairingAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// pairingChars is a code's length: 10 characters, 50 bits, shown as
// XXXXX-XXXXX. A guess succeeds with odds of about 2^-50 per outstanding
// code; the server-wide backstop (FailuresPerMinute, 320 by default) and
// MaxPairingCodes (100) bound them to about 2^-24 a day.
const pairingChars = 10

// ErrInvalidAccess: an access level other than read-only or read-write.
var ErrInvalidAccess = errors.New(`access must be "read-only" or "read-write"`)

// PairingCode is a code the host shows its user, once.
type PairingCode struct {
	Code      string    `json:"code"`
	Access    string    `json:"access"`
	ExpiresAt time.Time `json:"expiresAt"`
}

type pairing struct {
	access  string
	expires time.Time
}

// pairings are the outstanding pairing codes, by the SHA-256 of their
// normalized form: a code is looked up through its hash, never compared.
type pairings struct {
	max int
	mu  sync.Mutex // guards byHash
	// byHash: hash → code. Expired entries go when the map is full or
	// when looked up.
	byHash map[string]pairing
}

func newPairings(max int) *pairings { return &pairings{max: max, byHash: map[string]pairing{}} }

// NewPairingCode mints a single-use pairing code granting access, valid
// for Config.PairingTTL.
func (s *Server) NewPairingCode(access string) (PairingCode, error) {
	if access != AccessReadOnly && access != AccessReadWrite {
		return PairingCode{}, ErrInvalidAccess
	}
	now := s.cfg.Now()
	code := newPairingText()
	p := pairing{access: access, expires: now.Add(s.cfg.PairingTTL)}
	ps := s.pairing
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.byHash) >= ps.max {
		for h, q := range ps.byHash {
			if !now.Before(q.expires) {
				delete(ps.byHash, h)
			}
		}
		if len(ps.byHash) >= ps.max {
			return PairingCode{}, fault.ErrTooManyPairingCodes // MaxPairingCodes are outstanding
		}
	}
	ps.byHash[pairingHash(code)] = p
	return PairingCode{Code: code[:5] + "-" + code[5:], Access: access, ExpiresAt: p.expires}, nil
}

// redeem spends the pairing code typed as typed and returns the access it
// grants; ok is false for a code that is unknown, used or expired — which
// of them is not told.
func (ps *pairings) redeem(typed string, now time.Time) (access string, ok bool) {
	code := normalizePairing(typed)
	if len(code) != pairingChars {
		return "", false
	}
	h := pairingHash(code)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, found := ps.byHash[h]
	if !found {
		return "", false
	}
	delete(ps.byHash, h)
	if !now.Before(p.expires) {
		return "", false
	}
	return p.access, true
}

func newPairingText() string {
	var b [pairingChars]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = pairingAlphabet[b[i]&31]
	}
	return string(b[:])
}

func pairingHash(code string) string {
	sum := sha256.Sum256([]byte("pairing\x00" + code))
	return hex.EncodeToString(sum[:])
}

// normalizePairing upper-cases a typed code, drops spaces and dashes, and
// maps Crockford's look-alikes (O→0, I and L→1).
func normalizePairing(s string) string {
	if len(s) > 64 {
		return ""
	}
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		switch r {
		case ' ', '-', '\t':
			continue
		case 'O':
			r = '0'
		case 'I', 'L':
			r = '1'
		}
		if !strings.ContainsRune(pairingAlphabet, r) {
			return ""
		}
		b.WriteRune(r)
	}
	return b.String()
}

// failureBudgets bound the wrong pairing codes (SPEC §5c.8), each a token
// bucket refilled continuously: one per client (per client and source
// address, where the source is known), one per source address, and one of
// the whole server, a backstop that no one client or source can spend
// alone. While a submission's client, source or the server is out of
// tokens it is refused before its code is looked at, so a guesser learns
// nothing from it either; a wrong code spends one of each.
//
// Only a key that failed within the last minute has a bucket (a full one
// is the same as none and is pruned), and every failure spends the
// backstop too, so the keys held are bounded by the backstop: at most
// twice its rate of failures in a minute, each naming two keys.
type failureBudgets struct {
	client, source, server float64    // tokens per minute, and capacity
	mu                     sync.Mutex // guards the fields below
	byKey                  map[string]*bucket
	all                    bucket
}

// bucket is one token bucket; its zero value is full.
type bucket struct {
	spent float64 // tokens below capacity
	at    time.Time
}

// refill brings b to now and returns the tokens it has.
func (b *bucket) refill(rate float64, now time.Time) float64 {
	if now.After(b.at) {
		if !b.at.IsZero() {
			b.spent = max(0, b.spent-now.Sub(b.at).Minutes()*rate)
		}
		b.at = now
	}
	return rate - b.spent
}

func newFailureBudgets(client, source, server int) *failureBudgets {
	return &failureBudgets{client: float64(client), source: float64(source), server: float64(server), byKey: map[string]*bucket{}}
}

// budgetKeys are the buckets a submission draws on: its client's and, for
// a known source, the source's.
func budgetKeys(clientHash, source string) (client, src string) {
	client = "c\x00" + clientHash + "\x00" + source
	if source != "" {
		src = "s\x00" + source
	}
	return client, src
}

// open reports whether a submission of client from source may be checked
// now.
func (b *failureBudgets) open(clientHash, source string, now time.Time) bool {
	ck, sk := budgetKeys(clientHash, source)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.all.refill(b.server, now) < 1 {
		return false
	}
	if k := b.byKey[ck]; k != nil && k.refill(b.client, now) < 1 {
		return false
	}
	if k := b.byKey[sk]; sk != "" && k != nil && k.refill(b.source, now) < 1 {
		return false
	}
	return true
}

// fail spends one token of each of a wrong code's buckets.
func (b *failureBudgets) fail(clientHash, source string, now time.Time) {
	ck, sk := budgetKeys(clientHash, source)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all.refill(b.server, now)
	b.all.spent = min(b.server, b.all.spent+1)
	b.spendLocked(ck, b.client, now)
	if sk != "" {
		b.spendLocked(sk, b.source, now)
	}
	if len(b.byKey) > 4*int(b.server)+16 {
		for key, k := range b.byKey {
			rate := b.client
			if key[0] == 's' {
				rate = b.source
			}
			if k.refill(rate, now) >= rate {
				delete(b.byKey, key)
			}
		}
	}
}

func (b *failureBudgets) spendLocked(key string, rate float64, now time.Time) {
	k := b.byKey[key]
	if k == nil {
		k = &bucket{}
		b.byKey[key] = k
	}
	k.refill(rate, now)
	k.spent = min(rate, k.spent+1)
}

// sourceKey is the budget and share key of a request's remote address
// (ip:port): the IPv4 address, or the /64 of an IPv6 one (a host is given
// a /64, not an address); "" for loopback or an address that does not
// parse. On loopback every client shares one address — the host's own
// processes, or a proxy in front of the runtime — so telling sources apart
// there would make one source's budget the whole server's again.
func sourceKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return ""
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	a = a.WithZone("").Unmap()
	if a.IsLoopback() {
		return ""
	}
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}
