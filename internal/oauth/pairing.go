package oauth

import (
	"context"
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

// pairings are one process's outstanding pairing codes, by the SHA-256
// of their normalized form: a code is looked up through its hash, never
// compared.
type pairings struct {
	max int
	mu  sync.Mutex // guards byHash
	// byHash: hash → code. Expired entries go when the map is full or
	// when looked up.
	byHash map[string]Pairing
}

func newPairings(max int) *pairings { return &pairings{max: max, byHash: map[string]Pairing{}} }

// NewPairingCode mints a single-use pairing code granting access, valid
// for Config.PairingTTL.
func (s *Server) NewPairingCode(ctx context.Context, access string) (PairingCode, error) {
	if access != AccessReadOnly && access != AccessReadWrite {
		return PairingCode{}, ErrInvalidAccess
	}
	now := s.cfg.Now()
	code := newPairingText()
	p := Pairing{Access: access, Expires: now.Add(s.cfg.PairingTTL)}
	if err := s.state.AddPairing(ctx, pairingHash(code), p, now); err != nil {
		return PairingCode{}, err
	}
	return PairingCode{Code: code[:5] + "-" + code[5:], Access: access, ExpiresAt: p.Expires}, nil
}

// add stores p by its hash, unless max unexpired codes are outstanding.
func (ps *pairings) add(hash string, p Pairing, now time.Time) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.byHash) >= ps.max {
		for h, q := range ps.byHash {
			if !now.Before(q.Expires) {
				delete(ps.byHash, h)
			}
		}
		if len(ps.byHash) >= ps.max {
			return fault.ErrTooManyPairingCodes // MaxPairingCodes are outstanding
		}
	}
	ps.byHash[hash] = p
	return nil
}

// take spends the pairing code of hash and returns the access it grants;
// ok is false for a code that is unknown, used or expired — which of them
// is not told.
func (ps *pairings) take(hash string, now time.Time) (access string, ok bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p, found := ps.byHash[hash]
	if !found {
		return "", false
	}
	delete(ps.byHash, hash)
	if !now.Before(p.Expires) {
		return "", false
	}
	return p.Access, true
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
	byKey                  map[string]*Bucket
	all                    Bucket
}

func newFailureBudgets(client, source, server int) *failureBudgets {
	return &failureBudgets{client: float64(client), source: float64(source), server: float64(server), byKey: map[string]*Bucket{}}
}

// open reports whether a submission of client from source may be checked
// now.
func (b *failureBudgets) open(clientHash, source string, now time.Time) bool {
	ck, sk := BudgetKeys(clientHash, source)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.all.Refill(b.server, now) < 1 {
		return false
	}
	if k := b.byKey[ck]; k != nil && k.Refill(b.client, now) < 1 {
		return false
	}
	if k := b.byKey[sk]; sk != "" && k != nil && k.Refill(b.source, now) < 1 {
		return false
	}
	return true
}

// fail spends one token of each of a wrong code's buckets.
func (b *failureBudgets) fail(clientHash, source string, now time.Time) {
	ck, sk := BudgetKeys(clientHash, source)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all.Fail(b.server, now)
	b.spendLocked(ck, b.client, now)
	if sk != "" {
		b.spendLocked(sk, b.source, now)
	}
	if len(b.byKey) > MaxBudgetKeys(b.server) {
		for key, k := range b.byKey {
			rate := b.client
			if key[0] == 's' {
				rate = b.source
			}
			if k.Refill(rate, now) >= rate {
				delete(b.byKey, key)
			}
		}
	}
}

// MaxBudgetKeys is how many client and source buckets a State holds
// before it prunes the full ones: every failure spends the backstop, so
// at most twice its rate of keys failed within the last minute.
func MaxBudgetKeys(server float64) int { return 4*int(server) + 16 }

func (b *failureBudgets) spendLocked(key string, rate float64, now time.Time) {
	k := b.byKey[key]
	if k == nil {
		k = &Bucket{}
		b.byKey[key] = k
	}
	k.Fail(rate, now)
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
