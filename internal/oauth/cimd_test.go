package oauth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// TestSpecialPurposeRanges: every range of the IANA IPv4 and IPv6
// special-purpose address registries (and multicast, the deprecated
// IPv4-compatible ::/96 and site-local fec0::/10) is refused for a
// metadata document, its first and last addresses included; the address
// just outside is public unless it falls in another refused range (SPEC
// §5c.5).
func TestSpecialPurposeRanges(t *testing.T) {
	tests := []struct {
		prefix string
		in     []string        // more addresses inside, besides the first and last
		out    map[string]bool // addresses just outside → public?
	}{
		// IPv4 special-purpose registry.
		{"0.0.0.0/8", []string{"0.0.0.0", "0.1.2.3"}, map[string]bool{"1.0.0.0": true}},
		{"10.0.0.0/8", nil, map[string]bool{"9.255.255.255": true, "11.0.0.0": true}},
		{"100.64.0.0/10", nil, map[string]bool{"100.63.255.255": true, "100.128.0.0": true}},
		{"127.0.0.0/8", []string{"127.0.0.1"}, map[string]bool{"126.255.255.255": true, "128.0.0.0": true}},
		{"169.254.0.0/16", []string{"169.254.169.254"}, map[string]bool{"169.253.255.255": true, "169.255.0.0": true}},
		{"172.16.0.0/12", nil, map[string]bool{"172.15.255.255": true, "172.32.0.0": true}},
		{"192.0.0.0/24", []string{"192.0.0.9", "192.0.0.170"}, map[string]bool{"191.255.255.255": true, "192.0.1.0": true}},
		{"192.0.2.0/24", nil, map[string]bool{"192.0.1.255": true, "192.0.3.0": true}},
		{"192.31.196.0/24", nil, map[string]bool{"192.31.195.255": true, "192.31.197.0": true}},
		{"192.52.193.0/24", nil, map[string]bool{"192.52.192.255": true, "192.52.194.0": true}},
		{"192.88.99.0/24", nil, map[string]bool{"192.88.98.255": true, "192.88.100.0": true}},
		{"192.168.0.0/16", nil, map[string]bool{"192.167.255.255": true, "192.169.0.0": true}},
		{"192.175.48.0/24", nil, map[string]bool{"192.175.47.255": true, "192.175.49.0": true}},
		{"198.18.0.0/15", nil, map[string]bool{"198.17.255.255": true, "198.20.0.0": true}},
		{"198.51.100.0/24", nil, map[string]bool{"198.51.99.255": true, "198.51.101.0": true}},
		{"203.0.113.0/24", nil, map[string]bool{"203.0.112.255": true, "203.0.114.0": true}},
		{"224.0.0.0/4", []string{"224.0.0.1", "239.255.255.250"}, map[string]bool{"223.255.255.255": true, "240.0.0.0": false}},
		{"240.0.0.0/4", []string{"255.255.255.255"}, map[string]bool{"239.255.255.255": false}},
		// IPv6 special-purpose registry, outside 2000::/3.
		{"::/128", nil, map[string]bool{"::1": false}},
		{"::1/128", nil, map[string]bool{"::2": false}},
		{"::/96", []string{"::127.0.0.1", "::10.0.0.1", "::8.8.8.8", "::169.254.169.254"}, map[string]bool{"::1:0:0": false}},
		{"64:ff9b::/96", []string{"64:ff9b::127.0.0.1", "64:ff9b::8.8.8.8"}, map[string]bool{"64:ff9b::1:0:0": false}},
		{"64:ff9b:1::/48", nil, map[string]bool{"64:ff9b:2::": false}},
		{"100::/64", nil, map[string]bool{"100:0:0:1::": false}},
		{"100:0:0:1::/64", nil, map[string]bool{"100:0:0:2::": false}},
		{"5f00::/16", nil, map[string]bool{"5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": false}},
		{"fc00::/7", []string{"fd00::1"}, map[string]bool{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": false}},
		{"fe80::/10", []string{"fe80::1"}, map[string]bool{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff": false}},
		{"fec0::/10", nil, map[string]bool{"ff00::": false}},
		{"ff00::/8", []string{"ff02::1", "ff05::2"}, nil},
		// IPv6 special-purpose registry, inside 2000::/3.
		{"2001::/23", []string{"2001::1", "2001:1::1", "2001:1::2", "2001:2::1", "2001:3::1", "2001:4:112::1", "2001:10::1", "2001:20::1", "2001:30::1"},
			map[string]bool{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff": true, "2001:200::": true}},
		{"2001:db8::/32", nil, map[string]bool{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff": true, "2001:db9::": true}},
		{"2002::/16", nil, map[string]bool{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff": true, "2003::": true}},
		{"3fff::/20", nil, map[string]bool{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff": true, "3fff:1000::": true}},
		// The rest of IPv6 outside 2000::/3, the only space IANA assigns
		// for global unicast: reserved by the IETF.
		{"::/3", []string{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::2"}, map[string]bool{"2000::": true}},
		{"4000::/2", nil, map[string]bool{"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": true}},
		{"8000::/1", nil, nil},
	}
	for _, test := range tests {
		p := netip.MustParsePrefix(test.prefix)
		in := append([]string{p.Addr().String(), lastAddr(p).String()}, test.in...)
		for _, a := range in {
			addr := netip.MustParseAddr(a)
			if !p.Contains(addr) {
				t.Fatalf("%s: %s is not inside", test.prefix, a)
			}
			if publicAddr(addr) {
				t.Errorf("%s: publicAddr(%s) = true, want refused", test.prefix, a)
			}
		}
		for a, want := range test.out {
			addr := netip.MustParseAddr(a)
			if p.Contains(addr) {
				t.Fatalf("%s: %s is not outside", test.prefix, a)
			}
			if got := publicAddr(addr); got != want {
				t.Errorf("%s: publicAddr(%s), just outside, = %v, want %v", test.prefix, a, got, want)
			}
		}
	}
	// An IPv4-mapped address is its IPv4 address; a zone is refused.
	for a, want := range map[string]bool{
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "::ffff:169.254.169.254": false,
		"::ffff:8.8.8.8": true, "fe80::1%eth0": false, "2606:4700::1111%eth0": false,
	} {
		if got := publicAddr(netip.MustParseAddr(a)); got != want {
			t.Errorf("publicAddr(%s) = %v, want %v", a, got, want)
		}
	}
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestMetadataDocumentIPv4Compatible: issue 24 row 8. A document at
// the IPv4-compatible address ::127.0.0.1 (in ::/96) is refused at the
// dial, before any connection, like every other non-public address.
func TestMetadataDocumentIPv4Compatible(t *testing.T) {
	f := newCIMDFetcher(CIMDConfig{Timeout: 5 * time.Second, MaxBytes: 5 << 10})
	for _, id := range []string{"https://[::127.0.0.1]:1/client", "https://[::ffff:127.0.0.1]:1/client", "https://127.0.0.1:1/client"} {
		_, err := f.fetch(context.Background(), id)
		if !errors.Is(err, errPrivateAddress) {
			t.Errorf("fetch %s: %v, want errPrivateAddress (refused before connecting)", id, err)
		}
	}
}
