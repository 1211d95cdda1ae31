package transport

import (
	"net/http"
	"strconv"
	"time"

	"github.com/agenthost/mcpruntime/internal/ratelimit"
)

// admitRate takes n tokens of ns's bucket (Options.RatePerNamespace), or
// answers 429 with the Retry-After of its refill, counted refused messages
// times under the bound "rate_per_namespace" (a batch's every message), and
// reports false.
func (s *Server) admitRate(w http.ResponseWriter, ns string, n, messages int) bool {
	wait, ok := s.rates.Take(ns, n, time.Now())
	if ok {
		return true
	}
	for range messages - 1 {
		s.opts.Observer.Refused(failures[failRateLimited].bound) // and the POST's own, by fail
	}
	w.Header().Set("Retry-After", strconv.Itoa(ratelimit.Seconds(wait)))
	s.fail(w, failRateLimited)
	return false
}
