package oauth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
// XXXXX-XXXXX. With the failure budget (FailuresPerMinute, 20 by default)
// a guess succeeds with odds of about 2^-50 per try.
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

// failureBudget bounds the wrong pairing codes of all consent pages: a
// token bucket of perMinute tokens, refilled continuously. While it is
// empty every submission is refused before its code is looked at, so a
// guesser learns nothing from it either.
type failureBudget struct {
	perMinute float64
	mu        sync.Mutex // guards the fields below
	tokens    float64
	at        time.Time
}

func newFailureBudget(perMinute int) *failureBudget {
	return &failureBudget{perMinute: float64(perMinute), tokens: float64(perMinute)}
}

func (b *failureBudget) refillLocked(now time.Time) {
	if !b.at.IsZero() && now.After(b.at) {
		b.tokens = min(b.perMinute, b.tokens+now.Sub(b.at).Minutes()*b.perMinute)
	}
	b.at = now
}

// open reports whether a submission may be checked now.
func (b *failureBudget) open(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	return b.tokens >= 1
}

// fail spends one token for a wrong code.
func (b *failureBudget) fail(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	b.tokens = max(b.tokens-1, 0)
}
