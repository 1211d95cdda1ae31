package mcpruntime_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/durable"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// The durable store's cost (SPEC §3.8), in memory against a state file.

// BenchmarkStateWrites is lifecycle writes — posts, each one store write
// of a thread's row and one message row — by 1 or 64 writers, each on a
// thread of its own whose run it owns. It reports writes/s and the p50 and
// p99 of one write; on a state file every write waits for its sync, which
// 64 writers share (group commit).
func BenchmarkStateWrites(b *testing.B) {
	for _, store := range []string{"memory", "file"} {
		for _, writers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/writers=%d", store, writers), func(b *testing.B) {
				cfg := mcpruntime.Config{}
				if store == "file" {
					cfg.StateFile = filepath.Join(b.TempDir(), "state.db")
				}
				rt, _, _ := benchRuntimeWith(b, cfg)
				callers := benchWriters(b, rt, writers)
				var next atomic.Int64
				lat := make([][]time.Duration, writers)
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for w := range writers {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							t0 := time.Now()
							if _, err := rt.Post(context.Background(), callers[w], "W"+strconv.Itoa(w), "m"); err != nil {
								b.Error(err)
								return
							}
							lat[w] = append(lat[w], time.Since(t0))
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				all := slices.Concat(lat...)
				slices.Sort(all)
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
				if st := rt.StateStats(); st.Path != "" && b.N >= 10000 {
					// The file's growth per post: a message row and the
					// thread's row rewritten (bbolt grows its file in steps,
					// so only a long run says much).
					b.ReportMetric(float64(st.Bytes)/float64(b.N), "file-B/post")
				}
			})
		}
	}
}

// benchWriters creates threads W0..Wn-1 on rt, each with a provider
// session of instance "a" and a run it owns, and returns their callers.
func benchWriters(b *testing.B, rt *mcpruntime.Runtime, n int) []mcpruntime.Principal {
	b.Helper()
	ctx := context.Background()
	callers := make([]mcpruntime.Principal, n)
	for i := range n {
		id := "W" + strconv.Itoa(i)
		if _, err := rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); err != nil {
			b.Fatal(err)
		}
		ps, err := rt.OpenProviderSession(ctx, id, "a")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rt.StartRun(ctx, id, "a"); err != nil {
			b.Fatal(err)
		}
		if callers[i], err = rt.Authenticate(ps.Authorization[len("Bearer "):]); err != nil {
			b.Fatal(err)
		}
	}
	return callers
}

// BenchmarkStateToolCall is BenchmarkHTTPToolCall (thread_read) in memory
// and on a state file: the read path never touches the file.
func BenchmarkStateToolCall(b *testing.B) {
	for _, store := range []string{"memory", "file"} {
		b.Run(store, func(b *testing.B) {
			cfg := mcpruntime.Config{}
			if store == "file" {
				cfg.StateFile = filepath.Join(b.TempDir(), "state.db")
			}
			post := benchSessionWith(b, cfg)
			body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"thread_read","arguments":{}}}`)
			b.ReportAllocs()
			for b.Loop() {
				post(body)
			}
		})
	}
}

// BenchmarkStateStart is New on a state file of STATE_BENCH_THREADS
// threads (default 100 000), each with 8 messages and a provider
// credential of each of three instances (300 000), one of them live as a
// crash leaves it — so the start revokes them (reason restart) — and
// Close. It reports the file's size and its bytes per thread. The file is
// written once, straight through internal/durable, in writes of 1 000
// threads.
func BenchmarkStateStart(b *testing.B) {
	n := 100_000
	if s := os.Getenv("STATE_BENCH_THREADS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("STATE_BENCH_THREADS=%q: %v", s, err)
		}
	}
	path := filepath.Join(b.TempDir(), "state.db")
	benchStateFile(b, path, n)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	var closing time.Duration
	b.ResetTimer()
	for b.Loop() {
		// Each round starts on the crashed file: a copy, since a start
		// writes its revocations.
		b.StopTimer()
		run := filepath.Join(b.TempDir(), "run.db")
		if err := copyFile(path, run); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		rt, err := mcpruntime.New(mcpruntime.Config{StateFile: run, MaxThreads: 2 * n, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if st := rt.Stats(); st.Threads != n {
			b.Fatalf("%d threads after the start, want %d", st.Threads, n)
		}
		closeStart := time.Now()
		if err := rt.Close(); err != nil {
			b.Fatal(err)
		}
		closing += time.Since(closeStart)
	}
	b.ReportMetric(closing.Seconds()/float64(b.N), "close-s/op")
	b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
	b.ReportMetric(float64(fi.Size())/float64(n), "file-B/thread")
}

// benchStateFile writes n threads (8 messages each) with three provider
// credentials each, one live, into a new state file at path.
func benchStateFile(b *testing.B, path string, n int) {
	b.Helper()
	store, err := memdb.New()
	if err != nil {
		b.Fatal(err)
	}
	l, err := durable.Open(path, durable.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if err := l.Load(store); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	instances := []string{"a", "b", "c"}
	err = store.Write(func(w *memdb.Writer) error {
		for _, id := range instances {
			if err := w.PutInstance(&memdb.Instance{ID: id, Driver: "inproc", Created: now}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	const chunk = 1000
	for from := 0; from < n; from += chunk {
		err := store.Write(func(w *memdb.Writer) error {
			for i := from; i < min(from+chunk, n); i++ {
				th := &memdb.Thread{ID: fmt.Sprintf("thread-%06d", i), Status: memdb.ThreadActive, Instance: "a", Created: now, LastTurn: now}
				for range 8 {
					th.Messages = append(th.Messages, memdb.Message{Seq: th.NextSeq, Text: "a message of about forty bytes, say so.", Author: "cred:cred_" + strconv.Itoa(i) + "_0", Instance: "a", At: now})
					th.NextSeq++
				}
				if err := w.PutThread(th); err != nil {
					return err
				}
				for k, inst := range instances {
					cid := fmt.Sprintf("cred_%06d_%d", i, k)
					c := &memdb.Credential{ID: cid, TokenHash: token.Hash(cid), Kind: memdb.KindProvider, Namespace: "cred:" + cid,
						Thread: th.ID, Instance: inst, Issued: now, LastLive: now, State: memdb.StateRevoked, RevokeReason: "released", Revoked: now}
					if k == 0 {
						c.State, c.RevokeReason, c.Revoked = memdb.StateLive, "", time.Time{}
					}
					if err := w.PutCredential(c); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}
