package transport_test

import (
	"net/http"
	"testing"

	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

const metadataURL = "https://rt.example/.well-known/oauth-protected-resource/mcp"

// SPEC §5c: with OAuth discovery on, a 401 about a request without a
// token, with a malformed header, or with a token that is not
// provider-shaped — a client token, expired or revoked included — names
// the protected-resource metadata and the scope; a provider-shaped token's
// 401 never does, whatever is wrong with it.
func TestHTTPChallengeOAuthDiscovery(t *testing.T) {
	f := newFake(t)
	prov, provID := f.provider("T", "A", 0)
	cli, cliID := f.client("g", memdb.AccessReadOnly, 0)
	f.revoke(provID)
	f.revoke(cliID)
	e := newMCPEnvHost(t, f, transport.Options{}, transport.Host{ResourceMetadata: metadataURL, ChallengeScope: "mcp"})
	const (
		discover = `Bearer resource_metadata="` + metadataURL + `", scope="mcp"`
		invalid  = `Bearer error="invalid_token", resource_metadata="` + metadataURL + `", scope="mcp"`
	)
	tests := []struct {
		name, auth, want string
	}{
		{"no token", "", discover},
		{"not a bearer header", "Basic dXNlcjpwYXNz", invalid},
		{"a revoked client token", "Bearer " + cli, invalid},
		{"a JWT", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln", invalid},
		{"a revoked provider token", "Bearer " + prov, ht.InvalidToken},
		{"a made-up provider-shaped token", "Bearer mcprt_nope", ht.InvalidToken},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
				h := ht.Headers("", ht.MadeUpSessionID)
				if test.auth != "" {
					h.Set("Authorization", test.auth)
				}
				ht.Want401(t, method+" "+test.name, e.Do(method, h, ht.PingBody), test.want)
			}
		})
	}
}

// Without ResourceMetadata, no 401 names any metadata (the default).
func TestHTTPChallengeOff(t *testing.T) {
	f := newFake(t)
	cli, cliID := f.client("g", memdb.AccessReadOnly, 0)
	f.revoke(cliID)
	e := newMCPEnv(t, f, transport.Options{})
	ht.Want401(t, "no token", e.Do(http.MethodPost, ht.Headers("", ""), ht.PingBody), "Bearer")
	ht.Want401(t, "client token", e.Do(http.MethodPost, ht.Headers(cli, ""), ht.PingBody), ht.InvalidToken)
}
