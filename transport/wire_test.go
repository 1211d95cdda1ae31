package transport

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/jsonenc"
)

// FuzzToolResultEncoding: the hand-written encoding of a tools/call
// result writes the bytes (*mcp.CallToolResult).MarshalJSON writes, for
// any text (invalid UTF-8, control characters, HTML, line separators
// included), any number of blocks, with and without a structured result
// and isError; and a shape it does not handle is left to encoding/json.
func FuzzToolResultEncoding(f *testing.F) {
	f.Add("hello", "", 1, false, false)
	f.Add("<a href=\"x\">&amp;</a>\u2028\u2029\x00\x1f\x7f\b\f\n\r\t\\", `{"k":"<v>"}`, 2, true, false)
	f.Add("\xff\xfe broken \xc3", `[1,2,"\u2028"]`, 1, false, false)
	f.Add("", `"just a string"`, 0, true, false)
	f.Add("with meta", "", 1, false, true)
	f.Fuzz(func(t *testing.T, text, structured string, blocks int, isError, meta bool) {
		blocks %= 4
		if blocks < 0 {
			blocks = -blocks
		}
		r := &mcp.CallToolResult{Content: []mcp.Content{}, IsError: isError}
		for i := 0; i < blocks; i++ {
			r.Content = append(r.Content, &mcp.TextContent{Text: text})
		}
		if structured != "" && json.Valid([]byte(structured)) {
			var v any
			if err := json.Unmarshal([]byte(structured), &v); err != nil {
				t.Fatal(err)
			}
			r.StructuredContent = v
		}
		if meta {
			r.Content = append(r.Content, &mcp.TextContent{Text: text, Meta: mcp.Meta{"k": "v"}})
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		got, ok := appendToolResult(nil, r)
		if meta {
			if ok {
				t.Fatalf("appendToolResult took a block with _meta: %s", got)
			}
			return
		}
		if !ok || string(got) != string(want) {
			t.Fatalf("appendToolResult = %s (ok %v)\nwant %s", got, ok, want)
		}
		if r.StructuredContent != nil {
			// Encoded once (as the built-ins answer): copied, the same bytes.
			enc, err := jsonenc.Marshal(r.StructuredContent)
			if err != nil {
				t.Fatal(err)
			}
			pre := *r
			pre.StructuredContent = enc
			if got, ok := appendToolResult(nil, &pre); !ok || string(got) != string(want) {
				t.Fatalf("appendToolResult(encoded) = %s (ok %v)\nwant %s", got, ok, want)
			}
		}
		resp, ok := appendResultResponse(nil, json.RawMessage(`"id-1"`), r)
		wantResp, _ := json.Marshal(resultResponse(json.RawMessage(`"id-1"`), r))
		if !ok || string(resp) != string(wantResp)+"\n" {
			t.Fatalf("appendResultResponse = %s\nwant %s", resp, wantResp)
		}
	})
}

// TestToolResultEncodingShapes: nil Content is written as [] (the SDK
// writes null, which MCP's schema refuses); a result with _meta, input
// requests or a request state, and any result that is not a tools/call
// result, are not encoded by hand.
func TestToolResultEncodingShapes(t *testing.T) {
	if got, ok := appendToolResult(nil, &mcp.CallToolResult{}); !ok || string(got) != `{"content":[]}` {
		t.Errorf("appendToolResult(empty) = %s, %v; want {\"content\":[]}", got, ok)
	}
	for _, r := range []*mcp.CallToolResult{
		{Meta: mcp.Meta{"a": 1}},
		{RequestState: "s"},
		{InputRequests: mcp.InputRequestMap{"k": &mcp.ListRootsParams{}}},
		{Content: []mcp.Content{&mcp.ImageContent{Data: []byte{1}, MIMEType: "image/png"}}},
		{Content: []mcp.Content{&mcp.TextContent{Text: "x", Annotations: &mcp.Annotations{Priority: 1}}}},
	} {
		if got, ok := appendToolResult(nil, r); ok {
			t.Errorf("appendToolResult(%+v) = %s, want it left to encoding/json", r, got)
		}
	}
	for _, v := range []any{&mcp.ListToolsResult{}, map[string]any{}, (*mcp.CallToolResult)(nil)} {
		if _, ok := appendResultResponse(nil, json.RawMessage(`1`), v); ok {
			t.Errorf("appendResultResponse(%T) encoded by hand", v)
		}
	}
}

// TestRawResultEncoding: an initialize result encoded once and written by
// writeRawResult is the answer writeResult writes, byte for byte and
// header for header, for every version served and id spelling.
func TestRawResultEncoding(t *testing.T) {
	caps := &mcp.ServerCapabilities{
		Tools:   &mcp.ToolCapabilities{ListChanged: true},
		Logging: &mcp.LoggingCapabilities{},
	}
	for _, v := range protocolVersions {
		for _, id := range []string{`1`, `"a<b>&"`, `"\u2028    "`, `-2.5e3`, `"é"`} {
			t.Run(v+" "+id, func(t *testing.T) {
				res := &initializeResult{Capabilities: caps, ProtocolVersion: v, ServerInfo: serverInfo{Name: "n<&>", Version: "1"}}
				b, err := json.Marshal(res)
				if err != nil {
					t.Fatal(err)
				}
				want, got := httptest.NewRecorder(), httptest.NewRecorder()
				writeResult(want, json.RawMessage(id), res)
				writeRawResult(got, json.RawMessage(id), b)
				if diff := cmp.Diff(want.Body.String(), got.Body.String()); diff != "" {
					t.Errorf("body (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(want.Header(), got.Header()); diff != "" {
					t.Errorf("headers (-want +got):\n%s", diff)
				}
				if want.Code != got.Code {
					t.Errorf("status = %d, want %d", got.Code, want.Code)
				}
			})
		}
	}
}
