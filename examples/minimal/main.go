// Command minimal is the smallest host of the runtime: one node, in
// memory, one typed tool, one thread, the MCP endpoint on loopback. It
// links no etcd client, gRPC or zap (TestOneNodeLinksNoCluster in the
// module root checks it); several nodes are one import away, the package
// cluster set as Config.Cluster.
//
//	go run ./examples/minimal
package main

import (
	"context"
	"log"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type echoOut struct {
	Text string `json:"text"`
}

func main() {
	rt, err := mcpruntime.New(mcpruntime.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	err = mcpruntime.AddTool(rt, mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "echo", Description: "Echoes its text."},
		Access: mcpruntime.AccessRead,
	}, func(ctx context.Context, call *mcpruntime.ToolCall, in echoIn) (*mcp.CallToolResult, echoOut, error) {
		return nil, echoOut{Text: in.Text}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := rt.CreateThread(context.Background(), "t1", mcpruntime.ThreadOptions{}); err != nil {
		log.Fatal(err)
	}
	ep, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep)
	log.Fatal(http.ListenAndServe("127.0.0.1:7331", mux))
}
