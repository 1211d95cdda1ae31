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
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
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
	var in [128]byte // a token of up to 128 bytes is hashed from the stack
	var sum [sha256.Size]byte
	if len(tok) <= len(in) {
		sum = sha256.Sum256(in[:copy(in[:], tok)])
	} else {
		sum = sha256.Sum256([]byte(tok))
	}
	var hexSum [2 * sha256.Size]byte // encoded here: one allocation, the string
	hex.Encode(hexSum[:], sum[:])
	return string(hexSum[:])
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
