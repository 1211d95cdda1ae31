// Package ratelimit keeps a token bucket per key (a namespace, or a tool
// and a namespace), bounded in the keys it holds.
package ratelimit

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const (
	shards = 32
	// shardCap is the number of keys one shard keeps before it drops the
	// full buckets (a full bucket is the same as a new one).
	shardCap = 1024
)

// Buckets is a token bucket per key, all of one rate and size. The zero
// value, and one made with a rate ≤ 0, limits nothing.
type Buckets struct {
	limit  rate.Limit
	burst  int
	shards [shards]shard
}

type shard struct {
	mu sync.Mutex // guards m
	m  map[string]*rate.Limiter
}

// New returns buckets refilled at perSecond tokens a second, of burst
// tokens (≤ 0: perSecond rounded up, at least 1).
func New(perSecond float64, burst int) *Buckets {
	b := &Buckets{}
	if perSecond <= 0 {
		return b
	}
	b.limit, b.burst = rate.Limit(perSecond), burst
	if b.burst <= 0 {
		b.burst = max(int(math.Ceil(perSecond)), 1)
	}
	for i := range b.shards {
		b.shards[i].m = map[string]*rate.Limiter{}
	}
	return b
}

// On reports whether the buckets limit anything.
func (b *Buckets) On() bool { return b != nil && b.limit > 0 }

// Take takes n tokens of key's bucket at now, or none: then it returns how
// long until n would be there. More than the bucket holds never fits: its
// wait is a full bucket's refill.
func (b *Buckets) Take(key string, n int, now time.Time) (wait time.Duration, ok bool) {
	if !b.On() || n <= 0 {
		return 0, true
	}
	sh := &b.shards[hash(key)%shards]
	sh.mu.Lock()
	lim := sh.m[key]
	if lim == nil {
		if len(sh.m) >= shardCap {
			for k, l := range sh.m {
				if l.TokensAt(now) >= float64(b.burst) {
					delete(sh.m, k)
				}
			}
		}
		lim = rate.NewLimiter(b.limit, b.burst)
		sh.m[key] = lim
	}
	sh.mu.Unlock()
	if n > b.burst {
		return time.Duration(float64(b.burst) / float64(b.limit) * float64(time.Second)), false
	}
	r := lim.ReserveN(now, n)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// Seconds is a wait as a Retry-After: whole seconds, rounded up, at least 1.
func Seconds(wait time.Duration) int { return max(int(math.Ceil(wait.Seconds())), 1) }

// hash is FNV-1a.
func hash(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return h
}
