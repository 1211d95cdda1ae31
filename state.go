package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/durable"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/memdb"
)

// The durable store of one node (SPEC §3.8): Config.StateFile.

// Errors of New with a Config.StateFile, each naming the file.
var (
	// ErrStateInUse: another process holds the state file.
	ErrStateInUse = durable.ErrInUse
	// ErrStateFormat: the state file was written by a newer version.
	ErrStateFormat = durable.ErrFormat
	// ErrStateCorrupt: the file is damaged, truncated or not a state file.
	ErrStateCorrupt = durable.ErrCorrupt
	// ErrNotDurable is Backup's error for a runtime without a state file.
	ErrNotDurable = errors.New("runtime has no state file")
)

// restoreChunk is how many threads one recovery write changes at start.
const restoreChunk = 512

// openState opens cfg.StateFile and loads it into store.
func openState(cfg Config, store *memdb.Store, hist *stateHistogram) (*durable.Log, error) {
	if cfg.Cluster != nil {
		return nil, fmt.Errorf("Config.StateFile with Config.Cluster: %w (several nodes keep their state in etcd)", ErrInvalidArgument)
	}
	l, err := durable.Open(cfg.StateFile, durable.Options{Observe: hist.observe})
	if err != nil {
		return nil, err
	}
	if err := l.Load(store); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// restore brings back what the state file holds, before New returns: the
// provider instances registered before (with drivers this runtime has),
// every thread's actor and every client grant's. The provider sessions
// died with the process that held them, so first every thread's live
// provider credentials are revoked (credential.ReasonRestart) and its run
// ended, in writes of restoreChunk threads.
func (r *Runtime) restore() error {
	rd := r.store.Read()
	threads, err := rd.Threads()
	if err != nil {
		return err
	}
	now := r.cfg.Now()
	var stale []string
	for _, t := range threads {
		if t.Run != nil {
			stale = append(stale, t.ID)
			continue
		}
		creds, err := rd.CredentialsByThread(t.ID)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(creds, func(c *memdb.Credential) bool { return c.State == memdb.StateLive }) {
			stale = append(stale, t.ID)
		}
	}
	for chunk := range slices.Chunk(stale, restoreChunk) {
		err := r.store.Write(func(w *memdb.Writer) error {
			for _, id := range chunk {
				t, err := w.Thread(id)
				if err != nil {
					return err
				}
				if t.Run != nil {
					t.Run = nil
					if err := w.PutThread(t); err != nil {
						return err
					}
				}
				if _, err := credential.RevokeThread(w, id, credential.ReasonRestart, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("revoke the provider credentials of before the restart: %w", err)
		}
	}
	instances, err := rd.Instances()
	if err != nil {
		return err
	}
	for _, inst := range instances {
		spec := InstanceSpec{Driver: inst.Driver, Config: compactJSON(inst.Config), Capabilities: inst.Capabilities}
		if err := r.startInstance(context.Background(), inst.ID, spec, inst.Created); err != nil {
			// The record stays: a runtime with the driver serves it again.
			r.cfg.Logger.Error("provider instance of the state file not started", "instance", inst.ID, "driver", inst.Driver, "err", err)
		}
	}
	r.mu.Lock()
	for _, t := range threads {
		pid, err := r.root.SpawnNamed(r.threadProps(t.ID, ""), names.Thread(t.ID))
		if err != nil {
			r.mu.Unlock()
			return fmt.Errorf("start thread %s: %w", t.ID, err)
		}
		r.threads[t.ID] = pid
	}
	r.mu.Unlock()
	grants, err := rd.ClientGrants()
	if err != nil {
		return err
	}
	for _, g := range grants {
		if g.State != memdb.StateLive {
			continue
		}
		if _, err := r.spawnGrant(g.ID, g.Label, g.Access, g.Via); err != nil {
			return err
		}
	}
	if len(threads) > 0 || len(grants) > 0 || len(instances) > 0 {
		r.cfg.Logger.Info("state restored", "file", r.cfg.StateFile, "threads", len(threads), "client_grants", len(grants),
			"instances", len(instances), "provider_credentials_revoked_on", len(stale))
	}
	return nil
}

// Backup writes a consistent copy of the runtime's state file to w while
// the runtime goes on serving, and returns its size in bytes. The copy is
// a state file itself: a runtime started on it has the state of the
// moment the copy began. ErrNotDurable without Config.StateFile.
func (r *Runtime) Backup(w io.Writer) (int64, error) {
	if err := r.checkOpen(); err != nil {
		return 0, err
	}
	if r.state == nil {
		return 0, ErrNotDurable
	}
	return r.state.Backup(w)
}

// StateStats describes the durable store: zero Path without one.
type StateStats struct {
	Path  string
	Bytes int64 // the file's size
	// Commits counts the store writes synced to the file since start;
	// LatencyCounts[i] those whose latency was at most StateLatencyBounds[i]
	// (cumulative, the last bound is +Inf); LatencySum is their total.
	Commits       uint64
	LatencyCounts []uint64
	LatencySum    time.Duration
}

// StateLatencyBounds are the upper bounds of StateStats' latency buckets.
var StateLatencyBounds = []time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
	2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second,
}

// StateStats reads the durable store's figures.
func (r *Runtime) StateStats() StateStats {
	if r.state == nil {
		return StateStats{}
	}
	s := StateStats{Path: r.cfg.StateFile, Bytes: r.state.Size(), LatencySum: time.Duration(r.stateHist.sum.Load())}
	s.LatencyCounts = make([]uint64, len(StateLatencyBounds))
	var cum uint64
	for i := range StateLatencyBounds {
		cum += r.stateHist.counts[i].Load()
		s.LatencyCounts[i] = cum
	}
	s.Commits = cum + r.stateHist.counts[len(StateLatencyBounds)].Load()
	return s
}

// stateHistogram counts commit latencies into StateLatencyBounds' buckets
// (the last one past every bound).
type stateHistogram struct {
	counts [13]atomic.Uint64
	sum    atomic.Int64
}

func (h *stateHistogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(StateLatencyBounds, d)
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}
