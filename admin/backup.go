package admin

import (
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// backupState serves GET /admin/v1/backup: a consistent copy of the state
// file, taken while the runtime goes on serving (SPEC §3.8). One at a
// time: a backup holds a read transaction, and while it does the file
// cannot reuse the pages later writes free. A copy cut short (the runtime
// closing, a disk error) aborts the connection, so the client sees a
// truncated transfer, never a short file answered as whole.
func (s *Server) backupState(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if !s.authenticate(w, r) {
		return
	}
	start := time.Now()
	if s.rt.StateStats().Path == "" {
		s.writeError(w, r, mcpruntime.ErrNotDurable)
		return
	}
	select {
	case s.backup <- struct{}{}:
		defer func() { <-s.backup }()
	default:
		s.writeError(w, r, errBackupBusy)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="state.db"`)
	w.Header().Set("Cache-Control", "no-store")
	n, err := s.rt.Backup(w)
	if err != nil {
		s.opts.Logger.Error("admin backup failed", "bytes", n, "err", err, "duration", time.Since(start))
		panic(http.ErrAbortHandler)
	}
	s.opts.Logger.Info("admin backup", "bytes", n, "duration", time.Since(start))
}
