package token

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestNewTokensAreDistinctAndHashed(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok, hash := New()
		if !strings.HasPrefix(tok, Prefix) {
			t.Fatalf("New() token %q lacks prefix %q", tok, Prefix)
		}
		if !Valid(tok) {
			t.Fatalf("Valid(%q) = false for a minted token", tok)
		}
		if hash != Hash(tok) {
			t.Fatalf("New() hash = %q, want Hash(token) = %q", hash, Hash(tok))
		}
		if strings.Contains(hash, tok) || len(hash) != 64 {
			t.Fatalf("hash %q is not a hex SHA-256", hash)
		}
		if seen[tok] {
			t.Fatalf("New() repeated token %q", tok)
		}
		seen[tok] = true
	}
}

func TestTokenEntropy(t *testing.T) {
	tok, _ := New()
	// 43 base64url characters carry 258 bits of capacity for 256 random bits.
	if got := len(tok) - len(Prefix); got != 43 {
		t.Fatalf("token body length = %d, want 43 (256 bits)", got)
	}
}

func TestValid(t *testing.T) {
	good, _ := New()
	tests := []struct {
		name string
		tok  string
		want bool
	}{
		{"minted", good, true},
		{"empty", "", false},
		{"no prefix", strings.Repeat("a", len(good)), false},
		{"short", good[:len(good)-1], false},
		{"long", good + "a", false},
		{"bad char", good[:len(good)-1] + "=", false},
		{"space", good[:len(good)-1] + " ", false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := Valid(test.tok); got != test.want {
				t.Errorf("Valid(%q) = %v, want %v", test.tok, got, test.want)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	a, b := NewID("x_"), NewID("x_")
	if a == b {
		t.Fatalf("NewID repeated %q", a)
	}
	if len(a) != 2+32 || !strings.HasPrefix(a, "x_") {
		t.Fatalf("NewID(%q) = %q, want prefix and 32 hex digits", "x_", a)
	}
}

func TestPrefixes(t *testing.T) {
	client, _ := NewWith(ClientPrefix)
	refresh, _ := NewWith(RefreshPrefix)
	provider, _ := New()
	tests := []struct {
		name         string
		tok          string
		valid        bool // authenticates a request
		providerLike bool
	}{
		{"provider", provider, true, true},
		{"client", client, true, false},
		{"refresh", refresh, false, false},
		{"provider prefix, any tail", Prefix + "x", false, true},
		{"JWT-shaped", "eyJhbGciOiJSUzI1NiJ9.e30.sig", false, false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := Valid(test.tok); got != test.valid {
				t.Errorf("Valid(%q) = %v, want %v", test.tok, got, test.valid)
			}
			if got := Provider(test.tok); got != test.providerLike {
				t.Errorf("Provider(%q) = %v, want %v", test.tok, got, test.providerLike)
			}
		})
	}
	if !ValidWith(refresh, RefreshPrefix) || ValidWith(refresh, ClientPrefix) {
		t.Errorf("ValidWith(refresh token): want true for RefreshPrefix only")
	}
}

// TestNewIDAndHashEncoding: ids are the prefix and 32 hex digits whatever
// the prefix's length, and Hash is the hex SHA-256, built with one
// allocation (the string; a token is hashed on every request). NewID's
// count is not held here: under -race its random bytes escape (2), else 1;
// BenchmarkHTTPSessionChurn's allocs/op shows it.
func TestNewIDAndHashEncoding(t *testing.T) {
	long := strings.Repeat("p", 40)
	for _, prefix := range []string{"", "mcps_", strings.Repeat("q", 32), long} {
		id := NewID(prefix)
		rest, ok := strings.CutPrefix(id, prefix)
		if _, err := hex.DecodeString(rest); !ok || len(rest) != 32 || err != nil {
			t.Errorf("NewID(%q) = %q, want the prefix and 32 hex digits", prefix, id)
		}
	}
	for _, tok := range []string{"", "mcp_abc", strings.Repeat("z", 100)} {
		sum := sha256.Sum256([]byte(tok))
		if got, want := Hash(tok), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("Hash(%q) = %q, want %q", tok, got, want)
		}
	}
	tok := strings.Repeat("t", 50)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Hash(token)", func() { _ = Hash(tok) }},
	} {
		if n := testing.AllocsPerRun(100, tc.f); n != 1 {
			t.Errorf("%s: %v allocations, want 1", tc.name, n)
		}
	}
}
