package credential

import (
	"context"
	"log/slog"
	"time"
)

// Event kinds of the audit trail (SPEC §5c). Each is one credential event
// of a client grant, or a refused attempt to get one.
const (
	EventIssued              = "issued"               // a grant's access token (and refresh token) was issued
	EventRefreshed           = "refreshed"            // a new access token of the same grant
	EventRotated             = "rotated"              // a refresh token was spent and replaced
	EventRevoked             = "revoked"              // the grant was revoked; Reason says why
	EventAudienceRefused     = "audience_refused"     // a token bound to another resource was presented
	EventPairingFailed       = "pairing_failed"       // a consent form came with a wrong, used or expired pairing code, or was rate-limited
	EventAuthorizationFailed = "authorization_failed" // an authorization request or a token request was refused
)

// Event is one record of the audit trail: plain data, with no token, code,
// pairing code or hash in it. Hosts subscribe with
// Runtime.SubscribeCredentialEvents; the same record is logged.
type Event struct {
	Kind   string `json:"kind"`             // one of the Event* constants
	Client string `json:"client,omitempty"` // the grant id, when one is concerned
	// Credential is the id of the row concerned (never its token).
	Credential string `json:"credential,omitempty"`
	Access     string `json:"access,omitempty"`
	// Via is how the grant came: "admin", "oauth" (the runtime's own
	// authorization server) or "jwt" (an external issuer's tokens).
	Via string `json:"via,omitempty"`
	// Reason says why, for a revocation or a refusal: a stable snake_case
	// word (e.g. "admin", "refresh_reused", "pkce_mismatch", "code_reused").
	Reason string `json:"reason,omitempty"`
	// ClientName is the OAuth client's registered name, as it gave it.
	ClientName string    `json:"clientName,omitempty"`
	At         time.Time `json:"at"`
}

// Log writes e to logger as one structured record, "credential event".
// Refusals are warnings.
func (e Event) Log(logger *slog.Logger) {
	level := slog.LevelInfo
	switch e.Kind {
	case EventAudienceRefused, EventPairingFailed, EventAuthorizationFailed:
		level = slog.LevelWarn
	}
	attrs := []any{"kind", e.Kind}
	for _, kv := range [][2]string{
		{"client", e.Client}, {"credential", e.Credential}, {"access", e.Access},
		{"via", e.Via}, {"reason", e.Reason}, {"client_name", e.ClientName},
	} {
		if kv[1] != "" {
			attrs = append(attrs, kv[0], kv[1])
		}
	}
	logger.Log(context.Background(), level, "credential event", attrs...)
}
