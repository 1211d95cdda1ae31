package browser

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/oauth"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "rewrite docs/oauth-consent.png")

// grants answers one made-up token pair.
type grants struct{}

func (grants) IssueGrant(context.Context, oauth.GrantRequest) (oauth.Tokens, error) {
	return oauth.Tokens{Grant: "cl_1", Access: "read-only", AccessToken: "access", RefreshToken: "refresh", Expires: time.Now().Add(time.Hour)}, nil
}

func (grants) RefreshGrant(context.Context, string, string) (oauth.Tokens, error) {
	return oauth.Tokens{}, nil
}

func (grants) RevokeGrant(context.Context, string, string) error { return nil }

// chromium finds Debian's chromium (scripts/test-deps.sh installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run scripts/test-deps.sh, as make test does")
	return ""
}

// TestConsentPageInChromium: the consent page renders in a real browser
// (client name, redirect host, the pairing code input), a wrong code shows
// the problem and the form again, and a right one submitted by clicking
// Approve lands the browser on the client's redirect URI with code, state
// and iss; the code then exchanges.
func TestConsentPageInChromium(t *testing.T) {
	// The client's redirect URI: a loopback server that records the query.
	got := make(chan url.Values, 1)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/callback" {
			select {
			case got <- r.URL.Query():
			default:
			}
		}
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<!doctype html><title>signed in</title><p id=done>signed in</p>"))
	}))
	defer cb.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()
	srv, err := oauth.New(oauth.Config{
		Issuer: origin, Resource: origin + "/mcp", Secret: []byte(strings.Repeat("k", 32)),
		Grants: grants{}, ServerName: "mcpruntime", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	as := httptest.NewUnstartedServer(srv)
	as.Listener.Close()
	as.Listener = ln
	as.Start()
	defer as.Close()

	// Register, as a client would.
	resp, err := http.Post(origin+oauth.PathRegister, "application/json",
		strings.NewReader(`{"client_name":"Example IDE","redirect_uris":["http://127.0.0.1/callback"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	const verifier = "browser-verifier-browser-verifier-browser-ve"
	sum := sha256.Sum256([]byte(verifier))
	redirect := cb.URL + "/callback"
	q := url.Values{
		"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {redirect}, "state": {"xyz"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"resource": {origin + "/mcp"}, "scope": {"mcp"},
	}
	authURL := origin + oauth.PathAuthorize + "?" + q.Encode()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(800, 760), chromedp.Flag("headless", "new"))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute) // detects a hang only
	defer cancelTimeout()

	id := func(s string) chromedp.ID { return chromedp.ID(s) }
	if err := chromedp.Do(ctx, chromedp.Navigate(authURL), chromedp.WaitVisible(id("pairing_code"))); err != nil {
		t.Fatalf("open the consent page: %v", err)
	}
	name, err := chromedp.Run(ctx, chromedp.Text(id("client-name")))
	if err != nil {
		t.Fatal(err)
	}
	host, err := chromedp.Run(ctx, chromedp.Text(id("redirect-host")))
	if err != nil {
		t.Fatal(err)
	}
	if name != "Example IDE" || host != strings.TrimPrefix(cb.URL, "http://") {
		t.Errorf("page shows client %q, redirect host %q", name, host)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil || len(shot) == 0 {
		t.Fatalf("screenshot: %v", err)
	}
	if *updateScreenshot {
		if err := os.WriteFile("../../docs/oauth-consent.png", shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A wrong code: the same page again, with the problem.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(id("pairing_code"), "AAAAA-AAAAA"),
		chromedp.Click(id("approve")),
		chromedp.WaitVisible(id("problem")),
	); err != nil {
		t.Fatalf("submit a wrong code: %v", err)
	}
	problem, err := chromedp.Run(ctx, chromedp.Text(id("problem")))
	if err != nil || !strings.Contains(problem, "not accepted") {
		t.Errorf("problem line %q, %v", problem, err)
	}

	pc, err := srv.NewPairingCode(context.Background(), oauth.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(id("pairing_code"), pc.Code),
		chromedp.Click(id("approve")),
		chromedp.WaitVisible(id("done")),
	); err != nil {
		t.Fatalf("submit the right code: %v", err)
	}
	var back url.Values
	select {
	case back = <-got:
	case <-ctx.Done():
		t.Fatal("the browser never reached the redirect URI")
	}
	if back.Get("state") != "xyz" || back.Get("iss") != origin || back.Get("code") == "" {
		t.Fatalf("redirect query %v, want code, state xyz, iss %s", back, origin)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {back.Get("code")}, "client_id": {reg.ClientID},
		"redirect_uri": {redirect}, "code_verifier": {verifier}}
	resp, err = http.PostForm(origin+oauth.PathToken, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("exchange of the browser's code = %d", resp.StatusCode)
	}
}

// TestMain fails the package if the test leaves a goroutine behind (the
// browser's included: cancelling its context ends it).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
