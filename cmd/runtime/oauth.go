package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// oauthFlags are the settings of OAuth sign-in for MCP clients the host did
// not launch (SPEC §5c): on by default, on the MCP listener.
type oauthFlags struct {
	OAuth           bool     `config:"" name:"oauth" default:"true" negatable:"" help:"Serve OAuth sign-in for MCP clients on the MCP listener: discovery in 401s, registration, a consent page approved with a pairing code (runtime admin oauth pair), tokens. With --etcd (several nodes) only when --public-origin and --oauth-secret-file are given."`
	PublicOrigin    string   `config:"" name:"public-origin" placeholder:"URL" help:"Where MCP clients reach the MCP listener, scheme://host[:port]; every OAuth URL (issuer, endpoints, the resource) derives from it. Default: http://<listen address>; with --etcd required, the same on every node."`
	OAuthSecretFile string   `config:"" name:"oauth-secret-file" placeholder:"FILE" help:"File of at least 32 random bytes that MACs OAuth client ids and CSRF tokens; registrations then outlive a restart. Default: generated at start; with --etcd required, the same secret on every node."`
	PairingCodeTTL  duration `config:"" name:"pairing-code-ttl" default:"5m" placeholder:"DURATION" help:"How long a pairing code may be used."`
	RefreshTokenTTL duration `config:"" name:"refresh-token-ttl" default:"720h" placeholder:"DURATION" help:"How long an OAuth refresh token may be redeemed; never: no expiry. Access tokens live --client-token-ttl."`
	OAuthIssuer     string   `config:"" name:"oauth-issuer" placeholder:"URL" help:"Resource-server mode: accept JWT access tokens of this external authorization server instead of serving one."`
	OAuthScopes     []string `config:"" name:"oauth-required-scopes" placeholder:"SCOPE" help:"Resource-server mode: scopes every JWT must carry."`
	OAuthRWScope    string   `config:"" name:"oauth-read-write-scope" placeholder:"SCOPE" help:"Resource-server mode: a JWT carrying this scope is a read-write client (else read-only)."`
}

// validate checks what the types alone do not.
func (o *oauthFlags) validate() []error {
	var errs []error
	for _, u := range []struct{ name, v string }{{"public-origin", o.PublicOrigin}, {"oauth-issuer", o.OAuthIssuer}} {
		if u.v == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
			errs = append(errs, fmt.Errorf("--%s %q: want an absolute http(s) URL", u.name, u.v))
		} else if u.name == "public-origin" && p.Path != "" && p.Path != "/" {
			errs = append(errs, fmt.Errorf("--public-origin %q: want scheme://host[:port], no path", u.v))
		}
	}
	if o.PairingCodeTTL == never || o.PairingCodeTTL <= 0 {
		errs = append(errs, fmt.Errorf("--pairing-code-ttl: want a positive duration"))
	}
	if o.RefreshTokenTTL != never && o.RefreshTokenTTL <= 0 {
		errs = append(errs, fmt.Errorf("--refresh-token-ttl: want a positive duration or never"))
	}
	return errs
}

// config is the runtime's OAuthConfig; listenOrigin is the MCP listener's
// own URL, the default public origin.
func (o *oauthFlags) config(listenOrigin, mcpPath string, allowed []string) (mcpruntime.OAuthConfig, error) {
	if !o.OAuth {
		return mcpruntime.OAuthConfig{}, nil
	}
	c := mcpruntime.OAuthConfig{
		PublicOrigin: o.PublicOrigin, Path: mcpPath, AllowedHosts: allowed,
		PairingCodeTTL: time.Duration(o.PairingCodeTTL), RefreshTokenTTL: runtimeDuration(o.RefreshTokenTTL),
		Issuer: o.OAuthIssuer, RequiredScopes: o.OAuthScopes, ReadWriteScope: o.OAuthRWScope,
	}
	if c.PublicOrigin == "" {
		c.PublicOrigin = listenOrigin
	}
	if o.OAuthSecretFile != "" {
		b, err := os.ReadFile(o.OAuthSecretFile)
		if err != nil {
			return c, fmt.Errorf("--oauth-secret-file: %w", err)
		}
		b = bytes.TrimRight(b, "\r\n")
		if len(b) < 32 {
			return c, usageError{errors.New("--oauth-secret-file: want at least 32 bytes")}
		}
		c.Secret = b
	}
	return c, nil
}
