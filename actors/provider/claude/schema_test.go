package claude_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
)

// pinnedVersion is the Claude Code the driver is written against.
const pinnedVersion = "2.1.328"

// pins are what the driver uses of Claude Code's stream-json protocol, as
// the zod schemas compiled into the binary declare it (Claude Code ships
// no separate schema of its control protocol): each a literal to find
// fast and the expression it must match there, the schema's helpers'
// minified names left open (\w+).
var pins = []struct {
	what    string
	literal string
	re      string
}{
	{"control_request envelope", `"control_request"),request_id:`, `type:\w+\("control_request"\),request_id:\w+\(\),request:`},
	{"initialize request", `("initialize"),hooks:`, `subtype:\w+\("initialize"\),hooks:`},
	{"mcp_status request", `("mcp_status")`, `subtype:\w+\("mcp_status"\)`},
	{"mcp_status response", `Response containing the current status of all MCP server connections.`, `mcpServers:\w+\(\w+\(\)\)\}\)\.describe\("Response containing the current status of all MCP server connections\."\)`},
	{"MCP server states", `"connected","failed","needs-auth","pending","disabled"`, `status:\w+\(\["connected","failed","needs-auth","pending","disabled"\]\)`},
	{"MCP server error", `Error message (available when status is 'failed')`, `error:\w+\(\)\.optional\(\)\.describe\("Error message \(available when status is 'failed'\)"\)`},
	{"mcp_set_servers request", `("mcp_set_servers"),servers:`, `subtype:\w+\("mcp_set_servers"\),servers:`},
	{"mcp_set_servers response", `Result of replacing the set of dynamically managed MCP servers.`, `added:\w+\(\w+\(\)\),removed:\w+\(\w+\(\)\),errors:\w+\(\w+\(\),\w+\(\)\)\}\)\.describe\("Result of replacing`},
	{"http server config", `("http"),url:`, `type:\w+\("http"\),url:\w+\(\),headers:`},
	{"interrupt request", `("interrupt"),reason:`, `subtype:\w+\("interrupt"\),reason:`},
	{"interrupt cancel_queued", `("When true, the interrupt also cancels every uuid-stamped`, `cancel_queued:\w+\(\)\.optional\(\)\.describe\("When true, the interrupt also cancels every uuid-stamped`},
	{"interrupt response", `still_queued:`, `still_queued:\w+\(\w+\(\)\)\.describe\("Uuids of`},
	{"interrupt response cancelled", `),cancelled:`, `cancelled:\w+\(\w+\(\)\)\.optional\(\)\.describe\("Present only when the request set canc`},
	{"user message uuid", `.optional(),pasted_content:`, `uuid:\w+\(\)\.optional\(\),pasted_content:`},
	{"can_use_tool request", `("can_use_tool"),tool_name:`, `subtype:\w+\("can_use_tool"\),tool_name:`},
	{"permission deny", `("deny"),message:`, `behavior:\w+\("deny"\),message:`},
	{"user message", `("user"),message:`, `type:\w+\("user"\),message:`},
	{"system init", `mcp_servers:`, `tools:\w+\(\w+\(\)\),mcp_servers:\w+\(\w+\(\{name:\w+\(\),status:\w+\(\)`},
	{"result success", `("result"),subtype:`, `type:\w+\("result"\),subtype:\w+\("success"\)`},
	{"result errors", `"error_during_execution"`, `type:\w+\("result"\),subtype:\w+\(\["error_during_execution"[^\]]*\]\),[^}]*is_error:`},
	{"permission_denied message", `("permission_denied")`, `subtype:\w+\("permission_denied"\)`},
	{"api_retry message", `("api_retry"),attempt:`, `subtype:\w+\("api_retry"\),attempt:\w+\(\)\.int\(\),max_retries:`},
	// Claude Code's words the driver maps to needs_auth.
	{"401 at connect", `Server rejected the configured Authorization header (HTTP `, `Server rejected the configured Authorization header \(HTTP `},
	{"401 at a call", `rejected the Authorization header in its config`, `rejected the Authorization header in its config`},
	// The flags the driver passes.
	{"--strict-mcp-config", `--strict-mcp-config`, `--strict-mcp-config`},
	{"--input-format stream-json", `--input-format`, `--input-format`},
	{"--allowedTools", `--allowedTools`, `--allowedTools`},
}

// TestProtocolPinned checks the pinned binary's version and that every
// message, field and flag the driver uses is in its compiled schemas, so
// that an upgrade that drops one fails here rather than in a session.
func TestProtocolPinned(t *testing.T) {
	bin := claudeBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + agenttest.Home(t), "DISABLE_AUTOUPDATER=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("claude --version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(out)), pinnedVersion+" ") {
		t.Errorf("claude --version = %q, want %s: re-check the pins and the package doc's measurements", out, pinnedVersion)
	}

	found := make([]bool, len(pins))
	res := make([]*regexp.Regexp, len(pins))
	for i, p := range pins {
		res[i] = regexp.MustCompile(p.re)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Chunks overlapping by more than the longest match, so that none is
	// cut in two.
	const chunk, overlap = 8 << 20, 8 << 10
	buf := make([]byte, chunk+overlap)
	carry := 0
	for {
		n, err := io.ReadFull(f, buf[carry:])
		data := buf[:carry+n]
		for i, p := range pins {
			if !found[i] && bytes.Contains(data, []byte(p.literal)) && res[i].Match(data) {
				found[i] = true
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		carry = copy(buf, data[len(data)-overlap:])
	}
	for i, p := range pins {
		if !found[i] {
			t.Errorf("%s: no %s in the binary %s", p.what, p.re, bin)
		}
	}
}
