// Command scriptedmodel serves the scripted model of the agent drivers'
// tests (actors/provider/agenttest) on a free loopback port, for `make
// demo` and scripts/measure-agents.sh: the real agent CLIs (Codex, Claude
// Code, OpenCode) pointed at it as their model API run a scripted
// conversation with no network and no model key worth the name. It prints
// the base URL ("http://127.0.0.1:PORT"; the APIs are under /v1) as its
// first line on stdout, then serves until SIGTERM or SIGINT, and exits 0.
//
// What it answers is the package's script: a prompt "call <tool> <json>"
// calls that tool, "sleep <duration>" holds the answer, "sleep <duration>
// then call <tool> <json>" holds the call, and a tool's result is answered
// "saw: <result>" (go doc ./actors/provider/agenttest).
//
//	go run ./examples/scriptedmodel
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	m := agenttest.StartModel()
	defer m.Close()
	fmt.Println(m.URL)
	<-ctx.Done()
}
