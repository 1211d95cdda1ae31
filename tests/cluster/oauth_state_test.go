package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/oauth"
	"github.com/agenthost/mcpruntime/internal/oauthetcd"
)

// TestOAuthStateBounds: the bounds of SPEC §5c.16 that the authorization
// server keeps in etcd are the cluster's (SPEC §5d.9): two nodes adding
// pairing codes at once never hold more than MaxPairingCodes, and an
// expired one makes room; a full table of codes forgets a spent one
// before it refuses, and has no room while all are outstanding; the
// confirmed redirect URIs keep the most recently used. Each node is a
// State on its own etcd client.
func TestOAuthStateBounds(t *testing.T) {
	endpoint := startEtcd(t)
	l := oauth.Limits{MaxPairingCodes: 5, MaxCodes: 3, MaxConfirmedRedirects: 2, ClientFailuresPerMinute: 20, SourceFailuresPerMinute: 40, FailuresPerMinute: 320}
	var nodes [2]*oauthetcd.State
	for i := range nodes {
		cli := newClient(t, endpoint)
		t.Cleanup(func() { cli.Close() })
		nodes[i] = oauthetcd.New(oauthetcd.Config{Client: cli}, l)
	}
	ctx := context.Background()
	now := time.Now()

	var added, refused atomic.Int64
	var wg sync.WaitGroup
	for i, n := range nodes {
		for k := range 8 {
			wg.Go(func() {
				err := n.AddPairing(ctx, fmt.Sprintf("p%d-%d", i, k), oauth.Pairing{Access: oauth.AccessReadOnly, Expires: now.Add(time.Minute)}, now)
				switch {
				case err == nil:
					added.Add(1)
				case errors.Is(err, fault.ErrTooManyPairingCodes):
					refused.Add(1)
				default:
					t.Errorf("AddPairing: %v", err)
				}
			})
		}
	}
	wg.Wait()
	if added.Load() != 5 || refused.Load() != 11 {
		t.Fatalf("16 pairing codes added at once on two nodes: %d added, %d refused; want 5 and 11", added.Load(), refused.Load())
	}
	later := now.Add(2 * time.Minute) // every one expired
	if err := nodes[1].AddPairing(ctx, "after", oauth.Pairing{Access: oauth.AccessReadOnly, Expires: later.Add(time.Minute)}, later); err != nil {
		t.Fatalf("a pairing code once the others expired: %v", err)
	}
	if access, ok, err := nodes[0].TakePairing(ctx, "after", later); err != nil || !ok || access != oauth.AccessReadOnly {
		t.Fatalf("TakePairing on the other node = %q, %v, %v; want it", access, ok, err)
	}

	code := func(exp time.Time) oauth.Code { return oauth.Code{ClientID: "c", Expires: exp} }
	for i, h := range []string{"a", "b", "c"} {
		if err := nodes[i%2].AddCode(ctx, h, code(now.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	if room, err := nodes[0].CodeRoom(ctx, now); err != nil || room {
		t.Fatalf("CodeRoom with 3 outstanding codes of 3 = %v, %v; want none", room, err)
	}
	if _, first, found, err := nodes[1].SpendCode(ctx, "b"); err != nil || !found || !first {
		t.Fatalf("SpendCode(b) = %v, %v, %v", first, found, err)
	}
	if room, err := nodes[0].CodeRoom(ctx, now); err != nil || !room {
		t.Fatalf("CodeRoom with a spent code in the full table = %v, %v; want room (it is forgotten)", room, err)
	}
	if _, _, found, err := nodes[1].SpendCode(ctx, "b"); err != nil || found {
		t.Fatalf("the forgotten spent code = found %v, %v; want unknown", found, err)
	}

	for _, c := range []string{"x", "y"} {
		if err := nodes[0].Confirm(ctx, c, "https://r/cb"); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := nodes[1].Confirmed(ctx, "x", "https://r/cb"); err != nil || !ok { // x is now the most recently used
		t.Fatalf("Confirmed(x) = %v, %v", ok, err)
	}
	if err := nodes[1].Confirm(ctx, "z", "https://r/cb"); err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]bool{"x": true, "y": false, "z": true} {
		if ok, err := nodes[0].Confirmed(ctx, c, "https://r/cb"); err != nil || ok != want {
			t.Errorf("Confirmed(%s) = %v, %v; want %v", c, ok, err, want)
		}
	}
}
