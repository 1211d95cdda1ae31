package mcpruntime_test

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// builtinsServed lists the built-ins rt serves: its tools and the
// resource templates its endpoint lists.
func builtinsServed(t *testing.T, rt *mcpruntime.Runtime) []string {
	t.Helper()
	var got []string
	for _, tl := range rt.Tools() {
		got = append(got, tl.Name)
	}
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	p := clientOf(t, rt, memdb.AccessReadOnly)
	res := resultOf[*mcp.ListResourceTemplatesResult](t, "resources/templates/list", serve(t, b, serveReq{caller: p, method: "resources/templates/list", params: "{}"}))
	for _, rt := range res.ResourceTemplates {
		got = append(got, rt.Name)
	}
	slices.Sort(got)
	return got
}

// TestOmitBuiltins (SPEC §4.5): Config.OmitBuiltins leaves out each
// built-in by name, or all with "*"; an unknown name is refused; Builtins
// names every built-in a runtime serves.
func TestOmitBuiltins(t *testing.T) {
	all := slices.Sorted(slices.Values(mcpruntime.Builtins))
	if got := builtinsServed(t, quietRuntime(t, mcpruntime.Config{})); !slices.Equal(got, all) {
		t.Fatalf("a runtime serves the built-ins %v, Builtins says %v", got, all)
	}
	for _, name := range mcpruntime.Builtins {
		got := builtinsServed(t, quietRuntime(t, mcpruntime.Config{OmitBuiltins: []string{name}}))
		want := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == name })
		if !slices.Equal(got, want) {
			t.Errorf("OmitBuiltins [%s]: serves %v, want %v", name, got, want)
		}
	}
	if got := builtinsServed(t, quietRuntime(t, mcpruntime.Config{OmitBuiltins: []string{"*"}})); len(got) != 0 {
		t.Errorf(`OmitBuiltins ["*"]: serves %v, want none`, got)
	}
	rt, err := mcpruntime.New(mcpruntime.Config{OmitBuiltins: []string{"thread_delete"}, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, mcpruntime.ErrInvalidArgument) {
		if rt != nil {
			rt.Close()
		}
		t.Fatalf("OmitBuiltins [thread_delete]: %v, want ErrInvalidArgument", err)
	}
}
