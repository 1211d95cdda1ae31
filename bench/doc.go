// Package bench is the peer benchmark harness of the runtime. It
// is its own module so the runtime never depends on the peers it is
// measured against: the official MCP Go SDK and mcp-go.
//
// Commands:
//
//   - cmd/server serves one implementation (-impl runtime|gosdk|mcpgo|floor)
//     of the same tool ("echo", or "runtime_capabilities") behind bearer
//     auth on /mcp, plus a control listener (/bench/tokens, /bench/revoke,
//     /bench/stats, /bench/allocs, /debug/pprof/); or (-impl
//     binary|binary-raised) starts the shipped `runtime serve` as a child
//     and serves the control listener for it through its admin API and
//     /metrics.
//   - cmd/load drives a server over plain Streamable HTTP with net/http
//     (no SDK) in one of six modes: calls, modern, churn, modern-churn,
//     idle, revoke, calling echo or (-tool) another tool. It prints one
//     JSON line per run (package result) and one human line.
//   - cmd/report reads those JSON lines and prints one table of medians
//     with each variant's ratio to the runtime (the shipped binary among
//     them) and the runtime's and the shipped binary's ratio to each peer
//     and to the floor.
//
// run-peers.sh ties them together; README.md has the latest table.
package bench
