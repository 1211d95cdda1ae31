package session

// Owner is what a session is bound to: the namespace computed from the
// token that initialized it (SPEC §2). A request naming the session is
// dispatched only if the namespace computed from its own token is equal.
type Owner struct {
	Namespace  string // "cred:<CredentialID>" or "client:<ClientID>"
	Credential string // credential that initialized the session
}

// Owns reports whether a request authenticated as namespace may reach a
// session owned by o. Foreign and unknown sessions are answered alike by
// the transport (404), so this is the only place the comparison is made.
func (o Owner) Owns(namespace string) bool {
	return o.Namespace != "" && o.Namespace == namespace
}
