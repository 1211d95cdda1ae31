// Package token mints bearer tokens and identifiers and hashes tokens for
// storage. Tokens carry 256 random bits; identifiers carry 128. Both come
// from crypto/rand.
//
// A token's prefix says what it is, so that secret scanners and humans
// recognise one, and so that the MCP endpoint can tell from the bytes
// alone whether a refused token was a provider's (whose agent must never
// be sent into an OAuth flow) or a client's (whose client is pointed at the
// authorization metadata, even once the token expired or was revoked):
// [Prefix] for provider credentials, [ClientPrefix] for client-grant access
// tokens (admin-issued and OAuth-issued), [RefreshPrefix] for refresh
// tokens, which never authenticate a request.
//
// A refresh token names its family — the client grant it belongs to — and
// its generation in it, and carries the family's key besides its own
// random part (see [NewRefresh]): so a token of a generation spent long
// ago is still known for what it is (SPEC §5c.11), from one record per
// family that holds only the key's hash.
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// Token prefixes.
const (
	// Prefix starts every provider credential's token.
	Prefix = "mcprt_"
	// ClientPrefix starts every client-grant access token.
	ClientPrefix = "mcprc_"
	// RefreshPrefix starts every refresh token.
	RefreshPrefix = "mcprr_"
)

// tokenBytes is the entropy of a token: 256 bits (SPEC §2).
const tokenBytes = 32

// idBytes is the entropy of an identifier: 128 bits.
const idBytes = 16

// New returns a fresh provider token and the hash under which it is
// stored.
func New() (tok, hash string) { return NewWith(Prefix) }

// NewWith returns a fresh token starting with prefix (one of the prefixes
// above) and the hash under which it is stored.
func NewWith(prefix string) (tok, hash string) {
	var b [tokenBytes]byte
	rand.Read(b[:]) // never returns an error; it crashes the program instead
	tok = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return tok, Hash(tok)
}

// Hash returns the hex SHA-256 of tok, the only form in which a token is
// stored or looked up.
func Hash(tok string) string {
	sum := Sum(tok)
	var hexSum [2 * sha256.Size]byte // encoded here: one allocation, the string
	hex.Encode(hexSum[:], sum[:])
	return string(hexSum[:])
}

// Sum is the SHA-256 of tok, whose hex is Hash: what authentication looks
// a token up by, with no allocation.
func Sum(tok string) [sha256.Size]byte {
	var in [128]byte // a token of up to 128 bytes is hashed from the stack
	if len(tok) <= len(in) {
		return sha256.Sum256(in[:copy(in[:], tok)])
	}
	return sha256.Sum256([]byte(tok))
}

// Valid reports whether tok has the shape of a token that authenticates a
// request: a provider token or a client-grant access token. It is a cheap
// pre-filter, not authentication.
func Valid(tok string) bool { return ValidWith(tok, Prefix) || ValidWith(tok, ClientPrefix) }

// Provider reports whether tok is provider-shaped: it starts with Prefix,
// whatever follows (SPEC §5c: such a request is never offered OAuth
// discovery).
func Provider(tok string) bool { return strings.HasPrefix(tok, Prefix) }

// ValidWith reports whether tok has the shape of a token NewWith(prefix)
// mints.
func ValidWith(tok, prefix string) bool {
	if len(tok) != len(prefix)+base64.RawURLEncoding.EncodedLen(tokenBytes) || tok[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(tok); i++ {
		c := tok[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// NewID returns prefix followed by 128 random bits in lowercase hex.
func NewID(prefix string) string {
	var b [idBytes]byte
	rand.Read(b[:])
	// Built in a buffer on the stack for a prefix of up to 32 bytes (every
	// prefix the runtime uses): one allocation, the string.
	var buf [32 + 2*idBytes]byte
	if len(prefix) > 32 {
		return prefix + hex.EncodeToString(b[:])
	}
	n := copy(buf[:], prefix)
	n += hex.Encode(buf[n:], b[:])
	return string(buf[:n])
}

// FamilyKey is a refresh family's key: 128 random bits that every refresh
// token of the family carries and nothing else knows. Its holder has held
// one of the family's tokens. Only its hash ([FamilyKeyHash]) is stored.
type FamilyKey [16]byte

// NewFamilyKey returns a fresh family key.
func NewFamilyKey() FamilyKey {
	var k FamilyKey
	rand.Read(k[:])
	return k
}

// FamilyKeyHash returns the hex SHA-256 under which key is stored.
func FamilyKeyHash(key FamilyKey) string {
	sum := sha256.Sum256(append([]byte("refresh-family\x00"), key[:]...))
	return hex.EncodeToString(sum[:])
}

// Refresh is what a refresh token says of itself.
type Refresh struct {
	Family     string // the family: the id of the grant the token is of
	Generation uint64 // 1 for the family's first token, +1 at each rotation
	Key        FamilyKey
}

// Bounds of a refresh token's parts.
const (
	refreshRandBytes = 16 // the token's own random part, besides the key's 128 bits
	refreshFixed     = 8 + len(FamilyKey{}) + refreshRandBytes
	maxFamilyLen     = 64
)

// NewRefresh returns a fresh refresh token of family f and the hash under
// which it is stored: RefreshPrefix followed by the unpadded base64url of
// the generation (8 bytes, big-endian), the family key (16), 16 random
// bytes and the family id. The key and the random part are 256 secret
// bits; the family and generation are not secret. f.Family is 1 to 64
// bytes of [A-Za-z0-9_-].
func NewRefresh(f Refresh) (tok, hash string) {
	b := make([]byte, refreshFixed, refreshFixed+len(f.Family))
	binary.BigEndian.PutUint64(b, f.Generation)
	copy(b[8:], f.Key[:])
	rand.Read(b[8+len(f.Key) : refreshFixed])
	b = append(b, f.Family...)
	tok = RefreshPrefix + base64.RawURLEncoding.EncodeToString(b)
	return tok, Hash(tok)
}

// ParseRefresh reads what refresh token tok says of itself; false if it is
// not shaped as NewRefresh mints them. It proves nothing: the family's key
// hash, or the token's own row, does.
func ParseRefresh(tok string) (Refresh, bool) {
	rest, ok := strings.CutPrefix(tok, RefreshPrefix)
	if !ok || len(rest) > base64.RawURLEncoding.EncodedLen(refreshFixed+maxFamilyLen) {
		return Refresh{}, false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	if err != nil || len(b) <= refreshFixed || !idText(b[refreshFixed:]) {
		return Refresh{}, false
	}
	f := Refresh{Generation: binary.BigEndian.Uint64(b), Family: string(b[refreshFixed:])}
	copy(f.Key[:], b[8:])
	return f, true
}

// idText reports whether b is 1 to maxFamilyLen bytes of [A-Za-z0-9_-].
func idText(b []byte) bool {
	if len(b) == 0 || len(b) > maxFamilyLen {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
