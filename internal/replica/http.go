package replica

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agenthost/mcpruntime/internal/membership"
)

// Paths of the internal listener that belong to the replica.
const (
	// ConfirmPath answers a revoker's barrier: GET ConfirmPath?rev=R.
	ConfirmPath = membership.ConfirmPath
	// NodeAuthHeader carries the cluster's node-to-node secret on every
	// request between nodes.
	NodeAuthHeader = membership.NodeAuthHeader
)

// NodeAuth admits only requests that carry secret in NodeAuthHeader
// (compared in constant time); others get 403 with an empty body. An
// empty secret admits nothing.
func NodeAuth(secret string, next http.Handler) http.Handler {
	want := []byte(secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get(NodeAuthHeader))
		if len(want) == 0 || subtle.ConstantTimeCompare(got, want) != 1 {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ConfirmHandler answers confirmations: 204 once the replica has applied
// the revision in the query (the request's context bounds the wait: the
// revoker's deadline), 400 for a missing or malformed one, 503 when the
// applier stopped or the wait ended first. Mount it behind [NodeAuth].
func (n *Node) ConfirmHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rev, err := strconv.ParseInt(r.URL.Query().Get("rev"), 10, 64)
		if err != nil || rev <= 0 {
			http.Error(w, "rev: want a positive revision", http.StatusBadRequest)
			return
		}
		if err := n.WaitApplied(r.Context(), rev); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// httpConfirmer confirms through the other nodes' internal listeners, at
// the URLs their registrations publish.
type httpConfirmer struct {
	node   *Node
	client *http.Client
	secret string
}

func (c *httpConfirmer) ConfirmApplied(ctx context.Context, node string, rev int64) error {
	m, ok := c.node.Member(node)
	if !ok || m.URL == "" {
		return fmt.Errorf("confirm %s: no internal listener known", node)
	}
	u, err := url.JoinPath(m.URL, ConfirmPath)
	if err != nil {
		return fmt.Errorf("confirm %s: %w", node, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?rev="+strconv.FormatInt(rev, 10), nil)
	if err != nil {
		return fmt.Errorf("confirm %s: %w", node, err)
	}
	req.Header.Set(NodeAuthHeader, c.secret)
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("confirm %s: %w", node, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("confirm %s: %s", node, resp.Status)
	}
	return nil
}
