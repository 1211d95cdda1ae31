package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// JSON-RPC 2.0 error codes used by the transport.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeSessionRequired: a request other than initialize arrived without
	// a session. Clients that probe with a newer method fall back to
	// initialize on it.
	CodeSessionRequired = -32000
)

// message is one decoded JSON-RPC message: a request (ID and Method), a
// notification (Method only) or a response (ID with Result or Error).
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

func (m *message) isRequest() bool      { return m.Method != "" && len(m.ID) > 0 }
func (m *message) isNotification() bool { return m.Method != "" && len(m.ID) == 0 }
func (m *message) isResponse() bool     { return m.Method == "" && len(m.ID) > 0 }

var (
	errParse   = errors.New("parse error")
	errBatch   = errors.New("batch")
	errInvalid = errors.New("invalid request")
)

// decodeMessage parses one JSON-RPC message. A JSON array is errBatch:
// batches were removed from MCP in 2025-06-18 and are not accepted.
func decodeMessage(body []byte) (*message, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if !json.Valid(trimmed) {
			return nil, errParse
		}
		return nil, errBatch
	}
	// Members are read by their exact names (encoding/json would match
	// "JSONRPC" or "Method" too; JSON-RPC names are case-sensitive).
	var members map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&members); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, errInvalid // valid JSON, but not an object
		}
		return nil, errParse
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errParse // trailing data, a stray closing bracket included
	}
	var m message
	if err := unmarshalMember(members, "jsonrpc", &m.JSONRPC); err != nil {
		return nil, errInvalid
	}
	if err := unmarshalMember(members, "method", &m.Method); err != nil {
		return nil, errInvalid
	}
	m.ID, m.Params, m.Result, m.Error = members["id"], members["params"], members["result"], members["error"]
	if m.JSONRPC != "2.0" {
		return nil, errInvalid
	}
	if len(m.ID) > 0 && !validID(m.ID) {
		return nil, errInvalid
	}
	if m.Method == "" && len(m.ID) == 0 {
		return nil, errInvalid
	}
	if m.Method != "" && (len(m.Result) > 0 || len(m.Error) > 0) {
		return nil, errInvalid
	}
	return &m, nil
}

// unmarshalMember decodes members[name], if present, into v.
func unmarshalMember(members map[string]json.RawMessage, name string, v any) error {
	raw, ok := members[name]
	if !ok {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// validID accepts the ids MCP allows: a string or an integer-valued number.
func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"':
		var s string
		return json.Unmarshal(id, &s) == nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(id, &n) != nil {
			return false
		}
		_, err := n.Int64()
		return err == nil
	}
	return false
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

var nullID = json.RawMessage("null")

func resultResponse(id json.RawMessage, result any) *response {
	return &response{JSONRPC: "2.0", ID: id, Result: result}
}

func errorResponse(id json.RawMessage, code int, msg string) *response {
	if len(id) == 0 {
		id = nullID
	}
	return &response{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: code, Message: msg}}
}
