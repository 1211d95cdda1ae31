// Package replica is a node of several (SPEC §5d): it keeps the node's
// go-memdb replica of the replicated tables (threads, credentials, client
// grants) fed from etcd, proves it current (the fence), holds the node's
// membership, and commits the store's writes to etcd ([Node.Commit], the
// store's [memdb.Log]) — optimistically, fenced by the membership, and
// for a credential across every serving node: once a write that revoked
// a token returns, no serving node's replica authenticates it. The
// package cluster starts one (Config.Join); docs/cluster.md is the operator's
// guide.
//
// # Layout in etcd
//
//	/mcpruntime/<table>/<id>       JSON of the memdb record; the source of truth
//	/mcpruntime/serving/<node>     the node's registration (its id and internal URL), under its lease
//
// # The applier
//
// A node loads the layout's prefix at revision R0 into a fresh
// [memdb.Store] (in pages, each read at R0 and decoded while the store
// takes the one before, all in one store write), then applies one watch
// from R0+1 (WithPrevKV, WithProgressNotify, WithRequireLeader). Each
// watch response is applied in one store write — together with the
// responses already waiting behind it, up to applyCoalesce events, so
// that a replica that lags catches up in larger writes — so the store's
// commit hooks ([memdb.Store.OnCredentialsChanged], and through them the
// liveness monitor that closes streams) run for it; only then does the
// applied revision advance. A progress notification advances it to its header
// revision: etcd (3.5.13 and later)
// promises that every event up to that revision was delivered. So a
// waiter of [Node.WaitApplied](R) returns only after the hooks of every
// write ≤ R have run on this node.
//
// A watch that ends (etcd lost its leader, the stream broke) is started
// again from the revision after the one applied; the fence cannot confirm
// meanwhile, so the node does not serve. An applier that cannot apply (the
// revisions it needs compacted away, an event the store refuses) stops for
// good and the node stops serving: it fails closed rather than serve a
// replica it cannot prove, and rejoins only as a new Node.
//
// # The fence
//
// Every Interval the node renews its lease (KeepAliveOnce; s is when the
// renewal was sent), reads its own serving key linearizably (revision Q,
// and proof that it is registered under its current lease), asks the
// watch for a progress notification and waits until its replica has
// applied Q. If all of that succeeds, the replica was current at t0, the
// instant before the read was sent. [Node.Serving] is true only while
//
//	now − t0 ≤ F   and   now < s + TTL(1−ρ) − 5 ms
//
// on the node's monotonic clock: two atomic loads and a clock read. A
// node whose lease lapsed (or whose key is gone) has lost its membership:
// it stops for good ([Node.Stopped]) and rejoins only as a new Node, with
// a replica loaded afresh — a revoker may have left it out of a barrier.
//
// # Writes and the revoke
//
// [Node.Commit] writes a store transaction in one Txn conditioned on the
// mod revision of every row it read or wrote and on the node's own lease;
// one that changes a credential also lists the serving keys in its
// success branch, and waits as [Node.Revoke] does. [Node.Revoke] (a
// credential's revoke by id, for the tests of this package's rules)
// commits the revoked row in one Txn conditioned on the row's mod
// revision, whose success branch also lists the serving keys: the list is
// the one at the commit revision R. It then asks each listed
// node to confirm applied ≥ R (through a [Confirmer]) and waits, for
// those that do not answer, until F(1+ρ)+margin after the commit's
// answer arrived. A node not listed had either no key at R — its lease
// condition had already stopped it serving, and it serves again only
// after registering anew, after R — or registered after R. A listed node
// that did not confirm has no confirmation that started after the commit,
// so it stopped serving at most F after the commit (by its clock, whose
// rate differs from the revoker's by at most ρ). The revoker also waits
// for its own replica (read-your-writes).
package replica
