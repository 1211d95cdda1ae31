package cluster

import (
	"github.com/agenthost/mcpruntime/internal/oauth"
	"github.com/agenthost/mcpruntime/internal/oauthetcd"
)

// OAuthState is the OAuth authorization server's state of the cluster, in
// etcd, shared by every node (SPEC §5d.9): the runtime's authorization
// server keeps its pairing codes, authorization codes, wrong-code budgets
// and confirmed redirect URIs there, so that any node serves any step of
// a sign-in.
func (n *node) OAuthState(l oauth.Limits) oauth.State {
	return oauthetcd.New(oauthetcd.Config{Client: n.cli}, l)
}
