package oauth

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// docServer serves Client ID Metadata Documents over TLS on loopback.
type docServer struct {
	srv     *httptest.Server
	fetches atomic.Int32
	docs    map[string]string // path → body; "redirect" bodies redirect
}

func newDocServer(t *testing.T) *docServer {
	d := &docServer{docs: map[string]string{}}
	d.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.fetches.Add(1)
		body, ok := d.docs[r.URL.Path]
		switch {
		case !ok:
			http.NotFound(w, r)
		case body == "redirect":
			http.Redirect(w, r, "/good", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, body)
		}
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *docServer) url(path string) string { return d.srv.URL + path }

func (d *docServer) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(d.srv.Certificate())
	return p
}

func (d *docServer) doc(path, name string, uris ...string) {
	d.docs[path] = fmt.Sprintf(`{"client_id":%q,"client_name":%q,"redirect_uris":["%s"]}`, d.url(path), name, strings.Join(uris, `","`))
}

// SPEC §5c: an https client_id is a metadata document, fetched and used
// for the consent page and the redirect check; cached briefly.
func TestClientMetadataDocument(t *testing.T) {
	d := newDocServer(t)
	d.doc("/good", "Doc Client", "http://127.0.0.1/callback")
	e := newEnv(t, func(c *Config) {
		c.ClientMetadata = CIMDConfig{AllowPrivate: true, RootCAs: d.pool()}
	})
	verifier, challenge := pkce("doc")
	id := d.url("/good")
	f, a := e.openConsent(e.authParams(id, challenge))
	if a.status != http.StatusOK || !strings.Contains(a.body, "Doc Client") {
		t.Fatalf("consent page of a document client = %d %s", a.status, a.body)
	}
	code := e.submit(f, e.pair(AccessReadOnly)).header.Get("Location")
	q := mustQuery(t, code)
	if a := e.exchange(id, q.Get("code"), verifier); a.status != http.StatusOK {
		t.Fatalf("exchange = %d %s", a.status, a.body)
	}
	e.openConsent(e.authParams(id, challenge))
	if n := d.fetches.Load(); n != 1 {
		t.Errorf("%d fetches for two requests, want 1 (cached)", n)
	}
}

func TestClientMetadataRefusals(t *testing.T) {
	d := newDocServer(t)
	d.doc("/good", "Doc Client", "http://127.0.0.1/callback")
	d.docs["/other-id"] = `{"client_id":"https://elsewhere.example/x","redirect_uris":["http://127.0.0.1/callback"]}`
	d.docs["/big"] = `{"client_id":"` + d.url("/big") + `","redirect_uris":["http://127.0.0.1/callback"],"pad":"` + strings.Repeat("x", 6<<10) + `"}`
	d.docs["/redirect"] = "redirect"
	d.docs["/secret"] = `{"client_id":"` + d.url("/secret") + `","redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"private_key_jwt"}`
	d.docs["/no-uris"] = `{"client_id":"` + d.url("/no-uris") + `"}`
	allowed := func(c *Config) { c.ClientMetadata = CIMDConfig{AllowPrivate: true, RootCAs: d.pool()} }
	tests := []struct {
		name string
		opt  envOpt
		id   string
	}{
		{"loopback target refused by default", func(c *Config) { c.ClientMetadata = CIMDConfig{RootCAs: d.pool()} }, d.url("/good")},
		{"disabled", func(c *Config) { c.ClientMetadata = CIMDConfig{Disabled: true, AllowPrivate: true, RootCAs: d.pool()} }, d.url("/good")},
		{"untrusted certificate", func(c *Config) { c.ClientMetadata = CIMDConfig{AllowPrivate: true} }, d.url("/good")},
		{"document names another client_id", allowed, d.url("/other-id")},
		{"over 5 KiB", allowed, d.url("/big")},
		{"a redirect is not followed", allowed, d.url("/redirect")},
		{"a confidential client", allowed, d.url("/secret")},
		{"no redirect URIs", allowed, d.url("/no-uris")},
		{"not found", allowed, d.url("/missing")},
		{"http URL", allowed, strings.Replace(d.url("/good"), "https:", "http:", 1)},
		{"root path", allowed, d.url("/")},
		{"dot segment", allowed, d.url("/a/../good")},
		{"query", allowed, d.url("/good?x=1")},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t, test.opt)
			_, challenge := pkce("doc")
			_, a := e.openConsent(e.authParams(test.id, challenge))
			if a.status != http.StatusBadRequest || a.header.Get("Location") != "" || !strings.Contains(a.body, "not known") {
				t.Errorf("authorize = %d Location %q, want the unknown-client page", a.status, a.header.Get("Location"))
			}
		})
	}
	if m := newEnv(t).srv.serverMetadata(); m["client_id_metadata_document_supported"] != true {
		t.Errorf("metadata says client_id_metadata_document_supported = %v", m["client_id_metadata_document_supported"])
	}
}

func TestPublicAddr(t *testing.T) {
	for _, test := range []struct {
		addr string
		want bool
	}{
		{"8.8.8.8", true}, {"2606:4700::1111", true},
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"100.64.0.1", false}, {"0.0.0.0", false}, {"::1", false},
		{"fe80::1", false}, {"fc00::1", false}, {"::ffff:127.0.0.1", false}, {"224.0.0.1", false},
	} {
		if got := publicAddr(netip.MustParseAddr(test.addr)); got != test.want {
			t.Errorf("publicAddr(%s) = %v, want %v", test.addr, got, test.want)
		}
	}
}
