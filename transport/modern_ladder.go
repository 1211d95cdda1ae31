package transport

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The 2026-07-28 era's validation ladder (SPEC §5a.2): what a modern
// request is checked for once authenticated and its body read, in this
// order; the first failure answers, with the request's id.

// modernVersion is the one stateless protocol version served.
const modernVersion = "2026-07-28"

// allVersions are the versions served in either era, newest first: what
// server/discover lists and every -32022 names.
var allVersions = append([]string{modernVersion}, protocolVersions...)

// The _meta members of a modern request and result.
const (
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaLogLevel           = "io.modelcontextprotocol/logLevel"
	metaServerInfo         = "io.modelcontextprotocol/serverInfo"
	metaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// The per-request headers of the 2026-07-28 era.
const (
	headerMethod     = "Mcp-Method"
	headerName       = "Mcp-Name"
	headerParamStart = "Mcp-Param-"
)

// modernMethods are the request methods of the 2026-07-28 era; any other
// (initialize, ping, logging/setLevel, resources/subscribe, … included) is
// 404 -32601.
func modernMethod(m string) bool {
	return m == "server/discover" || m == "subscriptions/listen" || featureMethod(m)
}

// modernMeta is what a modern request's params._meta says.
type modernMeta struct {
	version       string
	caps          *mcp.ClientCapabilities // never nil once the ladder passed
	logLevel      int32                   // logRank of _meta logLevel; 0: none (no notifications/message)
	progressToken json.RawMessage         // nil: none
}

// rejection is the ladder's answer to a request it refuses.
type rejection struct {
	f       failure
	message string
	data    any
}

// readMeta is step 2: params an object (or absent) with a _meta object
// holding a protocolVersion string and a clientCapabilities object; a
// logLevel, if present, one MCP defines. clientInfo is never required.
func readMeta(params json.RawMessage) (modernMeta, *rejection) {
	var m modernMeta
	if len(params) == 0 || params[0] != '{' {
		return m, badMeta("params._meta is required")
	}
	meta := member(params, "_meta")
	if meta == nil || meta[0] != '{' {
		return m, badMeta("params._meta must be an object")
	}
	// The members read without a closure over m: m stays on the stack.
	var version, caps, level, progress []byte
	_ = eachMember(meta, func(name, value []byte) error {
		switch string(name) {
		case metaProtocolVersion:
			version = value
		case metaClientCapabilities:
			caps = value
		case metaLogLevel:
			level = value
		case "progressToken":
			progress = value
		}
		return nil
	})
	if version == nil || version[0] != '"' || stringValue(version, &m.version) != nil {
		return m, badMeta("params._meta." + metaProtocolVersion + " is required (a string)")
	}
	if progress != nil && string(progress) != "null" {
		m.progressToken = progress
	}
	if caps == nil || caps[0] != '{' {
		return m, badMeta("params._meta." + metaClientCapabilities + " is required (an object)")
	}
	c, err := clientCapabilities(caps)
	if err != nil {
		return m, badMeta("params._meta." + metaClientCapabilities + " is malformed")
	}
	if c == nil {
		c = noClientCapabilities
	}
	m.caps = c
	if level != nil {
		var l string
		if level[0] != '"' || stringValue(level, &l) != nil || logRank(mcp.LoggingLevel(l)) == 0 {
			return m, badMeta("params._meta." + metaLogLevel + " is not a log level")
		}
		m.logLevel = logRank(mcp.LoggingLevel(l))
	}
	return m, nil
}

// noClientCapabilities are the capabilities of a client that declares
// none ({}): shared by every such request, so read-only.
var noClientCapabilities = &mcp.ClientCapabilities{}

func badMeta(msg string) *rejection { return &rejection{f: failModernMeta, message: msg} }

// member is the value of obj's member name (the last, if given twice), or
// nil.
func member(obj []byte, name string) []byte {
	var v []byte
	_ = eachMember(obj, func(n, value []byte) error {
		if string(n) == name {
			v = value
		}
		return nil
	})
	return v
}

// checkHeaders is steps 3–5 after readMeta: MCP-Protocol-Version equal to
// the _meta claim (-32020), the claim served (-32022), Mcp-Method equal to
// the method and, for tools/call, prompts/get and resources/read, Mcp-Name
// equal to params.name or params.uri (-32020; values are case-sensitive,
// optional white space trimmed, =?base64?…?= decoded).
func checkHeaders(r *http.Request, msg *message, m *modernMeta) *rejection {
	if h := r.Header.Get(headerProtocol); h != m.version {
		return &rejection{f: failHeaderMismatch, message: "MCP-Protocol-Version header does not match params._meta." + metaProtocolVersion}
	}
	if m.version != modernVersion {
		return &rejection{f: failUnsupportedVersion, data: unsupportedVersionData{Supported: allVersions, Requested: truncate(m.version, 128)}}
	}
	if strings.TrimSpace(r.Header.Get(headerMethod)) != msg.Method {
		return &rejection{f: failHeaderMismatch, message: "Mcp-Method header does not match the method"}
	}
	var member string
	switch msg.Method {
	case "tools/call", "prompts/get":
		member = "name"
	case "resources/read":
		member = "uri"
	default:
		return nil
	}
	var want []byte
	_ = eachMember(msg.Params, func(name, value []byte) error {
		if string(name) == member && value[0] == '"' {
			want = value
		}
		return nil
	})
	got, ok := headerValue(r.Header.Values(headerName))
	if !ok || !jsonStringIs(want, got) {
		return &rejection{f: failHeaderMismatch, message: "Mcp-Name header does not match params." + member}
	}
	return nil
}

// jsonStringIs reports whether the JSON string value (nil: absent) is s,
// without a copy when it has no escapes.
func jsonStringIs(value []byte, s string) bool {
	if value == nil {
		return s == ""
	}
	if bytes.IndexByte(value, '\\') < 0 && utf8.Valid(value) {
		return string(value[1:len(value)-1]) == s
	}
	v, err := unquote(value)
	return err == nil && v == s
}

// headerValue is the one value of a mirrored header, white space trimmed
// and =?base64?…?= decoded (strict standard Base64, padded); false when
// absent, repeated or not decodable.
func headerValue(vs []string) (string, bool) {
	if len(vs) != 1 {
		return "", false
	}
	v := strings.TrimSpace(vs[0])
	inner, ok := strings.CutPrefix(v, "=?base64?")
	if !ok {
		return v, true
	}
	if inner, ok = strings.CutSuffix(inner, "?="); !ok {
		return v, true // no closing marker: a literal
	}
	b, err := base64.StdEncoding.Strict().DecodeString(inner)
	if err != nil {
		return "", false
	}
	return string(b), true
}
