// Package mcpclient is a minimal MCP Streamable HTTP client on net/http,
// just enough to drive benchmark load against any server: initialize (with
// the Mcp-Session-Id and the negotiated MCP-Protocol-Version), the
// initialized notification, tools/call of an echo tool or of any tool
// without arguments, DELETE, and the standalone GET event stream. Replies may be application/json or
// text/event-stream; see ReadSSEReply.
//
// It is deliberately not an SDK: it allocates little, checks only what the
// benchmark needs, and reports every non-success as an error the load
// generator can classify (StatusError, RPCError, ToolError).
package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// ProtocolVersion is the version offered in initialize. Later requests
// carry whatever the server answered.
const ProtocolVersion = "2025-11-25"

// Header names of the transport.
const (
	headerSession  = "Mcp-Session-Id"
	headerProtocol = "MCP-Protocol-Version"
)

// maxErrorBody bounds how much of an error answer is kept for the message.
const maxErrorBody = 256

// StatusError is an HTTP answer other than the one expected.
type StatusError struct {
	Method string // JSON-RPC method or HTTP method
	Code   int
	Body   string // the first bytes of the body
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Method, e.Code, e.Body)
}

// IsStatus reports whether err is a StatusError with the given code.
func IsStatus(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

// RPCError is a JSON-RPC error response.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// ToolError is a tools/call result that is not the expected one: isError
// set, another text than the echo's, or an incomplete result.
type ToolError struct{ Text string }

func (e *ToolError) Error() string { return "tool result: " + e.Text }

// NewHTTPClient returns an HTTP client for conns concurrent connections to
// one loopback server: no proxy, no compression, idle connections kept.
func NewHTTPClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}}
}

// Client sends requests to one MCP endpoint.
type Client struct {
	HTTP *http.Client
	URL  string // e.g. http://127.0.0.1:8080/mcp
}

// Session is an initialized MCP session (or, for a server without
// sessions, an empty ID). Its methods are safe for concurrent use.
type Session struct {
	client  *Client
	auth    string // "Bearer <token>"
	ID      string
	Version string
	// Modern: a Stateless session (2026-07-28): _meta and the per-request
	// headers on every call, no session id.
	Modern bool
	nextID atomic.Int64
}

// ModernVersion is the stateless protocol version of Stateless sessions.
const ModernVersion = "2026-07-28"

// Stateless returns a "session" of the 2026-07-28 era as token: nothing is
// sent; every call carries its version and capabilities in _meta and the
// Mcp-Method / Mcp-Name headers, and no session id.
func (c *Client) Stateless(token string) *Session {
	return &Session{client: c, auth: "Bearer " + token, Version: ModernVersion, Modern: true}
}

// Initialize opens a session as token: initialize, then
// notifications/initialized.
func (c *Client) Initialize(ctx context.Context, token string) (*Session, error) {
	s := &Session{client: c, auth: "Bearer " + token}
	id := s.nextID.Add(1)
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"mcpbench","version":"1"}}}`, id, ProtocolVersion)
	res, hdr, err := s.post(ctx, "initialize", "", body, id)
	if err != nil {
		return nil, err
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(res, &init); err != nil {
		return nil, fmt.Errorf("initialize result: %w", err)
	}
	s.ID = hdr.Get(headerSession)
	s.Version = init.ProtocolVersion
	if s.Version == "" {
		s.Version = ProtocolVersion
	}
	if _, _, err := s.post(ctx, "notifications/initialized", "", []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), 0); err != nil {
		return nil, err
	}
	return s, nil
}

// Echo is one tools/call of the echo tool; it fails unless the result is
// text equal to text.
func (s *Session) Echo(ctx context.Context, text string) error {
	id := s.nextID.Add(1)
	var body []byte
	if s.Modern {
		body = ModernEchoRequest(nil, id, text)
	} else {
		body = EchoRequest(nil, id, text)
	}
	res, _, err := s.post(ctx, "tools/call", EchoTool, body, id)
	if err != nil {
		return err
	}
	return checkEcho(res, text)
}

// EchoTool is the name of the echo tool.
const EchoTool = "echo"

// CallTool is one tools/call of the tool named name with no arguments
// ({}); it fails unless the result is a complete one (content present)
// without isError. What the content says is not checked: the tool is
// another server's (runtime_capabilities of the shipped binary), whose
// answer the load generator cannot predict.
func (s *Session) CallTool(ctx context.Context, name string) error {
	id := s.nextID.Add(1)
	res, _, err := s.post(ctx, "tools/call", name, ToolRequest(nil, id, name, s.Modern), id)
	if err != nil {
		return err
	}
	return checkComplete(res)
}

// Discover is one server/discover of a Stateless session; it fails unless
// the result's supportedVersions lists ModernVersion.
func (s *Session) Discover(ctx context.Context) error {
	if !s.Modern {
		return errors.New("server/discover: not a 2026-07-28 session")
	}
	id := s.nextID.Add(1)
	res, _, err := s.post(ctx, "server/discover", "", ModernDiscoverRequest(nil, id), id)
	if err != nil {
		return err
	}
	return checkDiscover(res)
}

// checkDiscover checks that a server/discover result offers ModernVersion.
func checkDiscover(res json.RawMessage) error {
	var r struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("server/discover result: %w", err)
	}
	if !slices.Contains(r.SupportedVersions, ModernVersion) {
		return fmt.Errorf("server/discover result does not offer %s: %.200s", ModernVersion, res)
	}
	return nil
}

// EchoRequest appends the JSON-RPC tools/call request of the echo tool to
// dst.
func EchoRequest(dst []byte, id int64, text string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"method":"tools/call","params":{"name":"echo","arguments":{"text":`...)
	quoted, _ := json.Marshal(text) // a string always marshals
	dst = append(dst, quoted...)
	return append(dst, `}}}`...)
}

// modernMeta is the _meta of every 2026-07-28 request the harness sends.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + ModernVersion + `","io.modelcontextprotocol/clientCapabilities":{}}`

// ModernEchoRequest appends the 2026-07-28 tools/call request of the echo
// tool to dst: EchoRequest's with the per-request _meta.
func ModernEchoRequest(dst []byte, id int64, text string) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"method":"tools/call","params":{"name":"echo","arguments":{"text":`...)
	quoted, _ := json.Marshal(text) // a string always marshals
	dst = append(dst, quoted...)
	dst = append(dst, `},`...)
	dst = append(dst, modernMeta...)
	return append(dst, `}}`...)
}

// ToolRequest appends the JSON-RPC tools/call request of the tool named
// name with no arguments to dst, with the per-request _meta when modern
// (2026-07-28).
func ToolRequest(dst []byte, id int64, name string, modern bool) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"method":"tools/call","params":{"name":`...)
	quoted, _ := json.Marshal(name) // a string always marshals
	dst = append(dst, quoted...)
	dst = append(dst, `,"arguments":{}`...)
	if modern {
		dst = append(dst, ',')
		dst = append(dst, modernMeta...)
	}
	return append(dst, `}}`...)
}

// ModernDiscoverRequest appends the 2026-07-28 server/discover request to
// dst.
func ModernDiscoverRequest(dst []byte, id int64) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"method":"server/discover","params":{`...)
	dst = append(dst, modernMeta...)
	return append(dst, `}}`...)
}

// checkEcho checks a tools/call result against the text sent.
func checkEcho(res json.RawMessage, text string) error {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("tools/call result: %w", err)
	}
	if r.IsError || len(r.Content) != 1 || r.Content[0].Text != text {
		return &ToolError{Text: string(res)}
	}
	return nil
}

// checkComplete checks that a tools/call result is complete and not an
// error: a content array with at least one block, each with a type,
// isError absent or false, and no resultType other than "complete" (a
// 2026-07-28 server may answer input_required instead).
func checkComplete(res json.RawMessage) error {
	var r struct {
		Content []struct {
			Type string `json:"type"`
		} `json:"content"`
		IsError    bool   `json:"isError"`
		ResultType string `json:"resultType"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("tools/call result: %w", err)
	}
	if r.IsError || len(r.Content) == 0 || (r.ResultType != "" && r.ResultType != "complete") {
		return &ToolError{Text: string(res)}
	}
	for _, c := range r.Content {
		if c.Type == "" {
			return &ToolError{Text: string(res)}
		}
	}
	return nil
}

// Delete ends the session (HTTP DELETE). Any 2xx is success.
func (s *Session) Delete(ctx context.Context) error {
	req, err := s.request(ctx, http.MethodDelete, "", "", nil)
	if err != nil {
		return err
	}
	resp, err := s.client.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("DELETE: %w", err)
	}
	defer drain(resp.Body)
	if resp.StatusCode/100 != 2 {
		return statusError("DELETE", resp)
	}
	return nil
}

// request builds a request carrying the session's headers; rpcMethod is
// the JSON-RPC method of a POST ("" otherwise) and tool the name a
// tools/call calls, mirrored in Mcp-Method and Mcp-Name by a Stateless
// session.
func (s *Session) request(ctx context.Context, method, rpcMethod, tool string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.client.URL, rd)
	if err != nil {
		return nil, err
	}
	h := req.Header
	h["Authorization"] = []string{s.auth}
	if s.ID != "" {
		h[headerSession] = []string{s.ID}
	}
	if s.Version != "" {
		h[headerProtocol] = []string{s.Version}
	}
	if s.Modern && rpcMethod != "" {
		h["Mcp-Method"] = []string{rpcMethod}
		if tool != "" {
			h["Mcp-Name"] = []string{tool}
		}
	}
	return req, nil
}

// post sends one JSON-RPC message; tool is the tool a tools/call calls
// ("" otherwise). For a request (id > 0) it returns the result of the
// response with that id; for a notification (id 0) it expects an empty
// 2xx answer.
func (s *Session) post(ctx context.Context, method, tool string, body []byte, id int64) (json.RawMessage, http.Header, error) {
	req, err := s.request(ctx, http.MethodPost, method, tool, body)
	if err != nil {
		return nil, nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Accept"] = []string{"application/json, text/event-stream"}
	resp, err := s.client.HTTP.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", method, err)
	}
	defer drain(resp.Body)
	if id == 0 {
		if resp.StatusCode/100 != 2 {
			return nil, nil, statusError(method, resp)
		}
		return nil, resp.Header, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, statusError(method, resp)
	}
	res, err := readReply(resp, id)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", method, err)
	}
	return res, resp.Header, nil
}

// readReply returns the result of the response with id in resp, a JSON
// body or an event stream.
func readReply(resp *http.Response, id int64) (json.RawMessage, error) {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		return ReadSSEReply(resp.Body, id)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	msg, err := decodeMessage(b)
	if err != nil {
		return nil, err
	}
	if !msg.answers(id) {
		return nil, fmt.Errorf("reply is not the response to request %d: %.200s", id, b)
	}
	return msg.result()
}

// message is the part of a JSON-RPC message the client looks at.
type message struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

func decodeMessage(b []byte) (*message, error) {
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode JSON-RPC message: %w", err)
	}
	return &m, nil
}

// answers reports whether m is the response to request id.
func (m *message) answers(id int64) bool {
	if len(m.Result) == 0 && m.Error == nil {
		return false // a request or a notification
	}
	var buf [20]byte
	return bytes.Equal(bytes.TrimSpace(m.ID), strconv.AppendInt(buf[:0], id, 10))
}

func (m *message) result() (json.RawMessage, error) {
	if m.Error != nil {
		return nil, m.Error
	}
	return m.Result, nil
}

func statusError(method string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return &StatusError{Method: method, Code: resp.StatusCode, Body: string(bytes.TrimSpace(b))}
}

// drain reads what is left of a body (bounded) and closes it, so the
// connection can be reused.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}
