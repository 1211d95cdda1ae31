package token

import (
	"encoding/base64"
	"strings"
	"testing"
)

// A refresh token says its family and generation and carries the
// family's key; its text has 256 secret bits, and two are never alike.
func TestRefreshRoundTrip(t *testing.T) {
	key := NewFamilyKey()
	f := Refresh{Family: "cl_0123456789abcdef0123456789abcdef", Generation: 1 << 40, Key: key}
	a, ha := NewRefresh(f)
	b, _ := NewRefresh(f)
	if a == b {
		t.Fatal("two refresh tokens of one generation are alike")
	}
	if !strings.HasPrefix(a, RefreshPrefix) || ha != Hash(a) || Valid(a) {
		t.Errorf("NewRefresh = %q, %q: want the refresh prefix, its hash, never a request's token", a, ha)
	}
	got, ok := ParseRefresh(a)
	if !ok || got != f {
		t.Errorf("ParseRefresh = %+v, %v; want %+v", got, ok, f)
	}
	if FamilyKeyHash(key) == FamilyKeyHash(NewFamilyKey()) || len(FamilyKeyHash(key)) != 64 {
		t.Errorf("FamilyKeyHash(%x) = %s", key, FamilyKeyHash(key))
	}
}

func TestParseRefreshRefusals(t *testing.T) {
	good, _ := NewRefresh(Refresh{Family: "g1", Generation: 1, Key: NewFamilyKey()})
	enc := func(b []byte) string { return RefreshPrefix + base64.RawURLEncoding.EncodeToString(b) }
	fixed := make([]byte, refreshFixed)
	for _, test := range []struct{ name, tok string }{
		{"empty", ""},
		{"another prefix", ClientPrefix + good[len(RefreshPrefix):]},
		{"a token of NewWith", func() string { s, _ := NewWith(RefreshPrefix); return s }()},
		{"no family", enc(fixed)},
		{"family not an id", enc(append(append([]byte(nil), fixed...), "g 1"...))},
		{"family too long", enc(append(append([]byte(nil), fixed...), strings.Repeat("a", maxFamilyLen+1)...))},
		{"not base64url", good + "="},
		{"truncated into its fixed part", good[:len(RefreshPrefix)+40]},
	} {
		if f, ok := ParseRefresh(test.tok); ok {
			t.Errorf("%s: ParseRefresh(%q) = %+v, want refused", test.name, test.tok, f)
		}
	}
}
