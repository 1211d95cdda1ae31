package servers

import (
	"encoding/json"
	"io"
	"net/http"
)

// floorServer answers JSON-RPC over plain net/http with no MCP machinery:
// no sessions (initialize returns a fixed result and no session id), no
// streams, one JSON reply per POST, whatever the request's protocol era
// (server/discover is a fixed result too). It is the cost of HTTP, the
// bearer check and JSON alone.
type floorServer struct {
	peer
	handler http.Handler
	tool    string // EchoTool or CapabilitiesTool
}

// maxFloorBody bounds a POST body.
const maxFloorBody = 4 << 20

func newFloor(tool string) *floorServer {
	s := &floorServer{tool: tool}
	s.handler = s.mount(http.HandlerFunc(s.serve))
	return s
}

func (s *floorServer) Handler() http.Handler { return s.handler }

func (s *floorServer) Close() error { return nil }

// floorInit is the fixed initialize result.
var floorInit = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"floor","version":"1"}}`)

// floorDiscover is the fixed server/discover result (2026-07-28).
var floorDiscover = json.RawMessage(`{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"tools":{}},"serverInfo":{"name":"floor","version":"1"},"resultType":"complete"}`)

type floorRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string   `json:"name"`
		Arguments echoArgs `json:"arguments"`
	} `json:"params"`
}

type floorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *floorError     `json:"error,omitempty"`
}

type floorError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type floorContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type floorCallResult struct {
	Content           []floorContent `json:"content"`
	StructuredContent any            `json:"structuredContent,omitempty"`
	IsError           bool           `json:"isError"`
}

// floorCapabilities is the stand-in runtime_capabilities's result: its
// JSON, encoded once, as structuredContent and as the text block (as the
// runtime's built-ins answer).
func floorCapabilities() (floorCallResult, error) {
	b, err := json.Marshal(capabilities())
	if err != nil {
		return floorCallResult{}, err
	}
	return floorCallResult{Content: []floorContent{{Type: "text", Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil
}

func (s *floorServer) serve(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		w.WriteHeader(http.StatusNoContent) // nothing to end
		return
	default:
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFloorBody))
	if err != nil {
		http.Error(w, "could not read body", http.StatusBadRequest)
		return
	}
	var req floorRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "parse error", http.StatusBadRequest)
		return
	}
	if len(req.ID) == 0 {
		w.WriteHeader(http.StatusAccepted) // a notification
		return
	}
	resp := floorResponse{JSONRPC: "2.0", ID: req.ID}
	switch {
	case req.Method == "initialize":
		resp.Result = floorInit
	case req.Method == "server/discover":
		resp.Result = floorDiscover
	case req.Method == "tools/call" && req.Params.Name == s.tool && s.tool == EchoTool:
		resp.Result = floorCallResult{Content: []floorContent{{Type: "text", Text: req.Params.Arguments.Text}}}
	case req.Method == "tools/call" && req.Params.Name == s.tool:
		res, err := floorCapabilities()
		if err != nil {
			resp.Error = &floorError{Code: -32603, Message: "internal error"}
			break
		}
		resp.Result = res
	case req.Method == "tools/call":
		resp.Error = &floorError{Code: -32602, Message: "unknown tool"}
	default:
		resp.Error = &floorError{Code: -32601, Message: "method not found"}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp) // a write error means the client left
}
