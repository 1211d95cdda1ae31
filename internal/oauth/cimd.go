package oauth

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cimdFetcher fetches and caches Client ID Metadata Documents
// (draft-ietf-oauth-client-id-metadata-document): the client id is an
// https URL, the document at it names the client and its redirect URIs.
//
// The URL is the attacker's to choose, so the fetch is the one place the
// server makes a request it did not configure: https only, no redirect
// followed (the document must be at its own URL), one connection to a
// public address (checked on the address dialled, after resolution, so a
// name that resolves to 127.0.0.1 is refused too), within Timeout and
// MaxBytes. A refused or failed fetch is errClient, like an unknown id;
// the detail is logged at debug level.
type cimdFetcher struct {
	cfg    CIMDConfig
	client *http.Client

	mu    sync.Mutex // guards cache
	cache map[string]cimdEntry
}

type cimdEntry struct {
	client  *Client
	expires time.Time
}

// errPrivateAddress: the document's host is not a public address.
var errPrivateAddress = errors.New("client metadata address is not public")

func newCIMDFetcher(cfg CIMDConfig) *cimdFetcher {
	dialer := &net.Dialer{Timeout: cfg.Timeout}
	if !cfg.AllowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !publicAddr(ap.Addr()) {
				return fmt.Errorf("%w: %s", errPrivateAddress, address)
			}
			return nil
		}
	}
	transport := &http.Transport{
		DialContext:            dialer.DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    cfg.Timeout,
		ResponseHeaderTimeout:  cfg.Timeout,
		MaxResponseHeaderBytes: 16 << 10,
		DisableKeepAlives:      true,
		Proxy:                  nil, // never through a proxy from the environment
	}
	return &cimdFetcher{
		cfg: cfg,
		client: &http.Client{
			Transport:     transport,
			Timeout:       cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		cache: map[string]cimdEntry{},
	}
}

// publicAddr reports whether a is a globally routable unicast address,
// one a metadata document may be fetched from (SPEC §5c.5). An
// IPv4-mapped address (::ffff:0:0/96) is judged by its IPv4 address; an
// address with a zone is refused. IPv6 must be in 2000::/3, the only
// space IANA assigns for global unicast: everything else is reserved by
// the IETF, which refuses at once the special-purpose ranges outside it
// (::/128, ::1/128, the deprecated IPv4-compatible ::/96, 64:ff9b::/96
// and 64:ff9b:1::/48, 100::/64, 5f00::/16, fc00::/7, fe80::/10, the
// deprecated site-local fec0::/10, multicast ff00::/8) and any added there
// later. Then no address in a range of specialPurpose.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		return false
	}
	for _, p := range specialPurpose {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// globalUnicast6 is the IPv6 global unicast space (IANA IPv6 Address
// Space registry).
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// specialPurpose are the ranges of the IANA IPv4 and IPv6 Special-Purpose
// Address Registries (IPv6: those inside 2000::/3; publicAddr refuses the
// rest of IPv6 whole), and IPv4 multicast. All are refused, those the
// registries mark globally reachable too (AS112, AMT, the anycast
// addresses of 192.0.0.0/24 and 2001::/23): no metadata document lives
// there, and refusing is safe.
var specialPurpose = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network" (RFC 791)
	netip.MustParsePrefix("10.0.0.0/8"),      // private use (RFC 1918)
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),     // loopback
	netip.MustParsePrefix("169.254.0.0/16"),  // link local
	netip.MustParsePrefix("172.16.0.0/12"),   // private use
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments (RFC 6890)
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("192.31.196.0/24"), // AS112-v4 (RFC 7535)
	netip.MustParsePrefix("192.52.193.0/24"), // AMT (RFC 7450)
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast (RFC 7526)
	netip.MustParsePrefix("192.168.0.0/16"),  // private use
	netip.MustParsePrefix("192.175.48.0/24"), // direct delegation AS112 (RFC 7534)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast (RFC 5771)
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, limited broadcast 255.255.255.255/32 included
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments: Teredo, benchmarking, ORCHID, …
	netip.MustParsePrefix("2001:db8::/32"),   // documentation (RFC 3849)
	netip.MustParsePrefix("2002::/16"),       // 6to4 (RFC 3056): may lead to any IPv4 address
	netip.MustParsePrefix("3fff::/20"),       // documentation (RFC 9637)
}

// checkDocumentURL accepts a client id URL: https, a host, a path other
// than "/", no query, fragment, user info or dot segment.
func checkDocumentURL(raw string) (*url.URL, error) {
	if len(raw) > maxRedirectURILen {
		return nil, errClient
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		strings.Contains(raw, "#") || u.Path == "" || u.Path == "/" {
		return nil, errClient
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return nil, errClient
		}
	}
	return u, nil
}

// get returns the client of document URL id: from the cache while it is
// fresh, else fetched.
func (f *cimdFetcher) get(ctx context.Context, id string, now time.Time) (*Client, error) {
	if _, err := checkDocumentURL(id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	e, ok := f.cache[id]
	f.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.client, nil
	}
	c, err := f.fetch(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errClient, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cache) >= f.cfg.CacheSize {
		for k, old := range f.cache {
			if !now.Before(old.expires) {
				delete(f.cache, k)
			}
		}
		for k := range f.cache { // still full: drop any one
			if len(f.cache) < f.cfg.CacheSize {
				break
			}
			delete(f.cache, k)
		}
	}
	f.cache[id] = cimdEntry{client: c, expires: now.Add(f.cfg.CacheTTL)}
	return c, nil
}

// document is the part of a metadata document the server reads.
type document struct {
	ClientID                string   `json:"client_id"`
	ClientName              string   `json:"client_name"`
	RedirectURIs            []string `json:"redirect_uris"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
}

func (f *cimdFetcher) fetch(ctx context.Context, id string) (*Client, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("client metadata %s: status %d", id, resp.StatusCode)
	}
	if resp.ContentLength > f.cfg.MaxBytes {
		return nil, fmt.Errorf("client metadata %s: %d bytes", id, resp.ContentLength)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, f.cfg.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > f.cfg.MaxBytes {
		return nil, fmt.Errorf("client metadata %s: over %d bytes", id, f.cfg.MaxBytes)
	}
	var doc document
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	if doc.ClientID != id {
		return nil, fmt.Errorf("client metadata %s names client_id %q", id, truncate(doc.ClientID))
	}
	if m := doc.TokenEndpointAuthMethod; m != "" && m != "none" {
		return nil, fmt.Errorf("client metadata %s: token_endpoint_auth_method %q (only none)", id, truncate(m))
	}
	name := doc.ClientName
	if name == "" {
		u, _ := url.Parse(id)
		name = u.Host
	}
	name, uris, err := checkMetadata(name, doc.RedirectURIs, doc.GrantTypes, doc.ResponseTypes)
	if err != nil {
		return nil, err
	}
	return &Client{ID: id, Name: name, RedirectURIs: uris, Document: true}, nil
}
