package names

import (
	"testing"
	"unsafe"
)

// TestMCPSessionShared: the id comes back equal and inside the name's
// bytes, so a session's entry, record and actor hold one string.
func TestMCPSessionShared(t *testing.T) {
	id := "mcps_0123456789abcdef0123456789abcdef"
	name, shared := MCPSessionShared(id)
	if name != MCPSession(id) || shared != id {
		t.Fatalf("MCPSessionShared(%q) = %q, %q; want %q, %q", id, name, shared, MCPSession(id), id)
	}
	if got, want := unsafe.StringData(shared), unsafe.StringData(name[len(mcpSessionPrefix):]); got != want {
		t.Errorf("the id is a copy (at %p), not the tail of the name (at %p)", got, want)
	}
}
