package oauth

import (
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/agenthost/mcpruntime/internal/httpguard"
)

// VerifierConfig configures the resource-server mode.
type VerifierConfig struct {
	Issuer         string
	Resource       string
	RequiredScopes []string
	ReadWriteScope string
	RootCAs        *x509.CertPool
	Guard          httpguard.Guard
	Now            func() time.Time
	Logger         *slog.Logger
}

// Verifier verifies an external issuer's JWT access tokens.
type Verifier struct {
	cfg VerifierConfig
}

// NewVerifier returns the verifier.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	return nil, errors.New("oauth: the resource-server mode is not built yet")
}

// Resource returns the resource.
func (v *Verifier) Resource() string { return v.cfg.Resource }

// ResourceMetadataURL returns the URL of the protected-resource metadata.
func (v *Verifier) ResourceMetadataURL() string { return "" }

func (v *Verifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {}
