// Package cluster holds the multi-node tests of the runtime,
// in the tests/ module, so that the runtime's module never depends on
// the etcd server: they run internal/replica on several in-process nodes
// against a real embedded etcd (go.etcd.io/etcd/server/v3/embed). Run
// them with `make cluster-test`; docs/cluster.md says what is built.
package cluster
