// Package token mints bearer tokens and identifiers and hashes tokens for
// storage. Tokens carry 256 random bits; identifiers carry 128. Both come
// from crypto/rand.
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// Prefix starts every token, so secret scanners and humans can recognise one.
const Prefix = "mcprt_"

// tokenBytes is the entropy of a token: 256 bits (SPEC §2).
const tokenBytes = 32

// idBytes is the entropy of an identifier: 128 bits.
const idBytes = 16

// New returns a fresh token and the hash under which it is stored.
func New() (tok, hash string) {
	var b [tokenBytes]byte
	rand.Read(b[:]) // never returns an error; it crashes the program instead
	tok = Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return tok, Hash(tok)
}

// Hash returns the hex SHA-256 of tok, the only form in which a token is
// stored or looked up.
func Hash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// Valid reports whether tok has the shape of a token this package mints. It
// is a cheap pre-filter, not authentication.
func Valid(tok string) bool {
	if len(tok) != len(Prefix)+base64.RawURLEncoding.EncodedLen(tokenBytes) || tok[:len(Prefix)] != Prefix {
		return false
	}
	for i := len(Prefix); i < len(tok); i++ {
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
	return prefix + hex.EncodeToString(b[:])
}
