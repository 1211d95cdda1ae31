// Package principal is who a request's token authenticates as (SPEC §2),
// in one type that every layer shares: the credential ledger builds it, the
// MCP endpoint carries it unboxed, the actors check it, and the module root
// re-exports it as mcpruntime.Principal. It imports nothing of the project.
package principal

import (
	"strings"
	"time"
)

// Kinds of principal.
const (
	KindProvider = "provider" // a provider credential, scoped to (thread, instance)
	KindClient   = "client"   // a client grant's token
)

// Access levels of a client grant.
const (
	AccessReadOnly  = "read-only"
	AccessReadWrite = "read-write"
)

// Namespace prefixes (SPEC §2.3).
const (
	providerPrefix = "cred:"
	clientPrefix   = "client:"
)

// Principal is a verified caller: built from the credential row a token
// resolved to, never from anything the request claims.
type Principal struct {
	Kind         string    `json:"kind"`                   // KindProvider or KindClient
	Namespace    string    `json:"namespace"`              // "cred:<CredentialID>" or "client:<ClientID>"
	CredentialID string    `json:"credentialId"`           // the row the token resolved to
	Thread       string    `json:"thread,omitempty"`       // provider credentials only
	Instance     string    `json:"instance,omitempty"`     // provider credentials only
	Client       string    `json:"client,omitempty"`       // client grants only
	Access       string    `json:"access,omitempty"`       // client grants only: AccessReadOnly or AccessReadWrite
	Audience     string    `json:"audience,omitempty"`     // the resource an OAuth-issued token is bound to; "": any
	Capabilities []string  `json:"capabilities,omitempty"` // fixed when the credential was minted
	Expires      time.Time `json:"expires,omitzero"`       // zero: never
}

// Provider reports whether p is a provider credential.
func (p Principal) Provider() bool { return p.Kind == KindProvider }

// ProviderNamespace is the namespace of provider credential id: the
// credential itself, so a rotated credential is another principal.
func ProviderNamespace(credentialID string) string { return providerPrefix + credentialID }

// ClientNamespace is the namespace shared by every token of client grant id.
func ClientNamespace(grantID string) string { return clientPrefix + grantID }

// ParseNamespace splits a namespace into its kind and id; ok is false for a
// string no constructor above returns.
func ParseNamespace(ns string) (kind, id string, ok bool) {
	if id, found := strings.CutPrefix(ns, providerPrefix); found && id != "" {
		return KindProvider, id, true
	}
	if id, found := strings.CutPrefix(ns, clientPrefix); found && id != "" {
		return KindClient, id, true
	}
	return "", "", false
}
