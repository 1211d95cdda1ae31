// Package bench is the peer benchmark harness of the runtime. It
// is its own module so the runtime never depends on the peers it is
// measured against: the official MCP Go SDK and mcp-go.
//
// Commands:
//
//   - cmd/server serves one implementation (-impl runtime|gosdk|mcpgo|floor)
//     of the same "echo" tool behind bearer auth on /mcp, plus a control
//     listener (/bench/tokens, /bench/revoke, /bench/stats, /debug/pprof/).
//   - cmd/load drives a server over plain Streamable HTTP with net/http
//     (no SDK) in one of four modes: calls, churn, idle, revoke. It prints
//     one JSON line per run (package result) and one human line.
//   - cmd/report reads those JSON lines and prints one table of medians
//     with the runtime's ratio to each peer and to the floor.
//
// run-peers.sh ties them together; README.md has the latest table.
package bench
