// Package cluster makes a runtime one node of several that share an etcd
// cluster (SPEC §5d): threads, credentials and client grants live in
// etcd, every node keeps a replica of them and authenticates every token
// locally, a revoke returns once no serving node still accepts the token,
// and a request for a thread whose actor runs on another node is
// forwarded to that node's internal listener. docs/cluster.md is the
// operator's guide.
//
// A runtime is one node, in memory, unless its Config.Cluster is set; a
// [Config] sets it. Importing this package is what links the etcd client
// (and gRPC under it): a runtime on one node does not.
//
//	rt, err := mcpruntime.New(mcpruntime.Config{
//		Cluster: cluster.Config{
//			Etcd:   []string{"10.0.0.2:2379"},
//			Node:   "n1",
//			URL:    "http://10.0.0.5:7441", // where the other nodes reach rt.InternalHandler()
//			Secret: secret,                 // the same on every node, at least MinSecret bytes
//		},
//	})
//	// serve rt.MCPHandler(…) to clients and rt.InternalHandler() on 10.0.0.5:7441;
//	// when <-rt.Lost() fires, close rt and start a new one.
//
// Between machines, make the internal listener mutual TLS
// ([Config.InternalTLS]: the node's certificate of the cluster's CA, URL
// https://) and serve it with [Config.InternalServerTLS]. A node id that a
// live member holds fails the join with [ErrNodeInUse] (SPEC §5d.8).
package cluster
