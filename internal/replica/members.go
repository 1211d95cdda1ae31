package replica

import (
	"encoding/json"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/agenthost/mcpruntime/internal/membership"
)

// Member is a node's registration, the value of its serving key (its
// JSON): while the key exists (its lease lives) the node is a member.
type Member = membership.Member

// applyMember applies a serving key's change to the member list. A value
// that does not decode still makes the node a member, without a URL.
func (n *Node) applyMember(typ mvccpb.Event_EventType, id string, value []byte) {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	if typ == mvccpb.DELETE {
		delete(n.members, id)
		select {
		case n.membersGone <- struct{}{}:
		default: // one is pending already
		}
		return
	}
	m := Member{ID: id}
	var got Member
	if json.Unmarshal(value, &got) == nil && got.ID == id {
		m.URL = got.URL
	}
	n.members[id] = m
}

// Member returns the member with id as this node's replica last saw it;
// ok is false when it is not a member (its lease lapsed, it closed, or it
// never was).
func (n *Node) Member(id string) (m Member, ok bool) {
	n.membersMu.RLock()
	defer n.membersMu.RUnlock()
	m, ok = n.members[id]
	return m, ok
}

// Members lists the members this node's replica has applied, by id.
func (n *Node) Members() []Member {
	n.membersMu.RLock()
	out := make([]Member, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	n.membersMu.RUnlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// MemberGone receives a value after a member left (its serving key was
// deleted: its lease lapsed or it closed); several departures may share
// one value. Read [Node.Members] for who is left.
func (n *Node) MemberGone() <-chan struct{} { return n.membersGone }
