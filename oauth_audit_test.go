package mcpruntime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/token"
)

// syncBuffer is a log destination the runtime's goroutines share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// SPEC §5c.15: one sign-in with a wrong pairing code, a reused
// authorization code, a refresh and a reused refresh token leaves its
// audit trail — events and log records — and none of them carries a
// token, a token's hash, an authorization code, a pairing code, the PKCE
// verifier or the CSRF token, at any log level.
func TestOAuthAuditTrailHasNoSecrets(t *testing.T) {
	var logs syncBuffer
	e := newOAuthEnv(t, mcpruntime.Config{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	var secrets []string
	secret := func(s string) string {
		if s == "" {
			t.Fatal("an empty secret")
		}
		secrets = append(secrets, s)
		return s
	}

	resp, err := http.Post(e.origin+"/oauth/register", "application/json", strings.NewReader(`{"client_name":"audited","redirect_uris":["http://127.0.0.1/cb"]}`))
	noErr(t, err)
	var reg map[string]any
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	clientID, _ := reg["client_id"].(string)
	verifier := secret("audit-verifier-audit-verifier-audit-verifier")
	q := url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {"http://127.0.0.1/cb"}, "state": {"s"},
		"code_challenge": {s256(verifier)}, "code_challenge_method": {"S256"}, "resource": {e.origin + "/mcp"},
	}
	resp, err = noFollow.Get(e.origin + "/oauth/authorize?" + q.Encode())
	noErr(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	form := url.Values{"action": {"approve"}}
	for _, m := range formField.FindAllStringSubmatch(string(page), -1) {
		form.Set(m[1], m[2])
	}
	secret(form.Get("csrf"))
	submit := func(code string) *http.Response {
		form.Set("pairing_code", code)
		resp, err := noFollow.PostForm(e.origin+"/oauth/authorize", form)
		noErr(t, err)
		resp.Body.Close()
		return resp
	}
	if resp := submit("AAAAA-AAAAA"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a wrong pairing code = %d, want 403", resp.StatusCode)
	}
	pc, err := e.rt.NewPairingCode(context.Background(), "read-only")
	noErr(t, err)
	secret(pc.Code)
	secret(strings.ReplaceAll(pc.Code, "-", ""))
	resp = submit(pc.Code)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil {
		t.Fatalf("consent = %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	code := secret(loc.Query().Get("code"))
	exchange := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {clientID},
		"redirect_uri": {"http://127.0.0.1/cb"}, "code_verifier": {verifier}}
	status, toks := postToken(t, e.origin, exchange)
	if status != http.StatusOK {
		t.Fatalf("exchange = %d %v", status, toks)
	}
	first := secret(toks["refresh_token"].(string))
	secret(toks["access_token"].(string))
	status, next := e.refresh(clientID, first)
	if status != http.StatusOK {
		t.Fatalf("refresh = %d %v", status, next)
	}
	secret(next["refresh_token"].(string))
	secret(next["access_token"].(string))
	if status, _ := e.refresh(clientID, first); status != http.StatusBadRequest {
		t.Fatalf("reused refresh = %d, want 400", status)
	}
	// The code again (its grant revoked by the reuse already).
	if status, _ := postToken(t, e.origin, exchange); status != http.StatusBadRequest {
		t.Fatalf("the code again = %d, want 400", status)
	}

	for _, want := range []string{
		"pairing_failed/wrong_code", "issued/", "authorization_failed/code_reused",
		"refreshed/", "rotated/", "revoked/refresh_reused",
	} {
		if !slices.Contains(e.kinds(), want) {
			t.Errorf("credential events %v lack %s", e.kinds(), want)
		}
	}
	e.mu.Lock()
	events, _ := json.Marshal(e.events)
	e.mu.Unlock()
	log := logs.String()
	if !strings.Contains(log, `"msg":"credential event"`) {
		t.Errorf("no credential event was logged:\n%s", log)
	}
	for _, s := range secrets {
		for _, form := range []string{s, token.Hash(s)} {
			if strings.Contains(log, form) {
				t.Errorf("the log carries a secret (or its hash) %.8s…", form)
			}
			if strings.Contains(string(events), form) {
				t.Errorf("a credential event carries a secret (or its hash) %.8s…", form)
			}
		}
	}
}
