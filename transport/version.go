package transport

import (
	"encoding/json"
	"net/http"
	"slices"
)

// Protocol versions served, newest first (SPEC §5). A request without an
// MCP-Protocol-Version header is taken as 2025-03-26.
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// metaProtocolVersion is the _meta member by which a 2026-07-28 request
// claims its version in the body (SPEC §5a).
const metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

// served reports whether version is one the endpoint serves.
func served(version string) bool { return slices.Contains(protocolVersions, version) }

// headerVersion returns the request's MCP-Protocol-Version and whether it
// is served (absent: 2025-03-26, served).
func headerVersion(r *http.Request) (string, bool) {
	v := r.Header.Get(headerProtocol)
	return v, v == "" || served(v)
}

// metaVersion returns the version a message claims in params._meta, if it
// claims one (a string member metaProtocolVersion). params comes from a
// validated body.
func metaVersion(params json.RawMessage) (version string, claimed bool) {
	if len(params) == 0 || params[0] != '{' {
		return "", false
	}
	_ = eachMember(params, func(name, value []byte) error {
		if string(name) != "_meta" || value[0] != '{' {
			return nil
		}
		return eachMember(value, func(name, value []byte) error {
			if string(name) == metaProtocolVersion && value[0] == '"' {
				var v string // on the heap (stringValue keeps it), so only here
				if stringValue(value, &v) == nil {
					version, claimed = v, true
				}
			}
			return nil
		})
	})
	return version, claimed
}

func negotiate(requested string) string {
	if served(requested) {
		return requested
	}
	return protocolVersions[0]
}

// unsupportedVersionData is the data of a -32022 error.
type unsupportedVersionData struct {
	Supported []string `json:"supported"`
	Requested string   `json:"requested"`
}

// failVersion answers a request for a protocol version neither era
// serves with 400 and -32022 UnsupportedProtocolVersion, listing every
// version served (2026-07-28 first) and echoing the one requested (cut to
// 128 bytes) and the request's id, if known (the revision's §Protocol
// Version Negotiation; a client picks a version from the list).
func (s *Server) failVersion(w http.ResponseWriter, id json.RawMessage, requested string) {
	a := &failures[failUnsupportedVersion]
	s.failWith(w, failUnsupportedVersion, &response{JSONRPC: "2.0", ID: id, Error: &rpcError{
		Code:    a.code,
		Message: a.message,
		Data:    unsupportedVersionData{Supported: allVersions, Requested: truncate(requested, 128)},
	}})
}

// requestID is the id of msg if it is a request: what an error about it
// echoes. Nil for a notification, a response or an undecodable body.
func requestID(msg *message) json.RawMessage {
	if msg == nil || !msg.isRequest() {
		return nil
	}
	return msg.ID
}
