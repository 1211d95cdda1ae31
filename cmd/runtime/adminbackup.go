package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/agenthost/mcpruntime/internal/durable"
	"github.com/agenthost/mcpruntime/memdb"
)

// backupCmd is `runtime admin backup FILE`: a consistent hot copy of the
// server's state file (GET /admin/v1/backup), written to a temporary file
// beside FILE (mode 0600), synced, opened and read through as the runtime
// would at start, then renamed into place. A copy cut short, or one that
// does not read back, leaves FILE as it was.
type backupCmd struct {
	File string `arg:"" placeholder:"FILE" help:"Where the copy goes; an existing file is replaced only by a copy that read back whole."`
}

func (c *backupCmd) Run(d *deps) error {
	a := &d.cli.Admin
	base, err := checkURL("admin-url", a.AdminURL)
	if err != nil {
		return usageError{err}
	}
	token, err := a.token(d.env)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.ctx, a.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base.String(), "/")+"/admin/v1/backup", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", base, err)
	}
	defer resp.Body.Close()
	if a.Verbose {
		fmt.Fprintf(d.stderr, "GET /admin/v1/backup → %d %s\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if resp.StatusCode != http.StatusOK {
		e := &apiError{Status: resp.StatusCode}
		var eb struct{ Error, Message string }
		if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&eb) == nil {
			e.Code, e.Message = eb.Error, eb.Message
		}
		return e
	}
	dir := filepath.Dir(c.File)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(c.File)+".*.tmp")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	n, err := io.Copy(tmp, resp.Body)
	if err != nil {
		return fmt.Errorf("backup: the transfer broke off after %d bytes (%w); %s is unchanged", n, err, c.File)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	threads, err := verifyBackup(tmp.Name())
	if err != nil {
		return fmt.Errorf("backup: the copy does not read back (%w); %s is unchanged", err, c.File)
	}
	if err := os.Rename(tmp.Name(), c.File); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	keep = true
	if f, err := os.Open(dir); err == nil { // the rename itself, on disk
		_ = f.Sync()
		f.Close()
	}
	out, _ := json.Marshal(map[string]any{"file": c.File, "bytes": n, "threads": threads})
	return a.print(d.stdout, out)
}

// verifyBackup opens a copied state file and loads it as a start would,
// and returns how many threads it holds.
func verifyBackup(path string) (int, error) {
	l, err := durable.Open(path, durable.Options{})
	if err != nil {
		return 0, err
	}
	store, err := memdb.New()
	if err == nil {
		err = l.Load(store)
	}
	cerr := l.Close()
	if err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	threads, err := store.Read().Threads()
	if err != nil {
		return 0, errors.Join(errors.New("read its threads"), err)
	}
	return len(threads), nil
}
