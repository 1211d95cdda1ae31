package admin_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

var pairingShape = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{5}-[0-9A-HJKMNP-TV-Z]{5}$`)

// SPEC §5c, §7.2: POST /admin/v1/oauth/pairing-codes mints a pairing code
// with its access level; the code appears in that answer only.
func TestPairingCodeRoute(t *testing.T) {
	e := newEnv(t, envOptions{oauth: mcpruntime.OAuthConfig{PublicOrigin: "http://127.0.0.1:7331"}})
	wantCode := func(access string) func(*testing.T, *env, *response) {
		return func(t *testing.T, e *env, r *response) {
			wantFields(t, r, "code", "access", "expiresAt")
			code := field(t, r, "code")
			if !pairingShape.MatchString(code) {
				t.Errorf("code %q, want XXXXX-XXXXX of Crockford base32", code)
			}
			wantEqual(t, "access", field(t, r, "access"), access)
			if at, err := time.Parse(time.RFC3339Nano, field(t, r, "expiresAt")); err != nil || at.Before(time.Now()) {
				t.Errorf("expiresAt %q, want a time to come", field(t, r, "expiresAt"))
			}
			e.mint("pc"+access, code)
		}
	}
	e.walk([]step{
		{name: "read-write", request: post("/admin/v1/oauth/pairing-codes", `{"access":"read-write"}`),
			wantStatus: http.StatusCreated, check: wantCode("read-write")},
		{name: "no body: read-only", request: bodyless("/admin/v1/oauth/pairing-codes"),
			wantStatus: http.StatusCreated, check: wantCode("read-only")},
		{name: "bad access", request: post("/admin/v1/oauth/pairing-codes", `{"access":"admin"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_argument"},
		{name: "unknown field", request: post("/admin/v1/oauth/pairing-codes", `{"scope":"x"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
	})
	e.checkNoLeaks()
}

func TestPairingCodeRouteWithoutOAuth(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.walk([]step{
		{name: "OAuth off", request: post("/admin/v1/oauth/pairing-codes", `{"access":"read-only"}`),
			wantStatus: http.StatusConflict, wantCode: "oauth_disabled"},
	})
}
