package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The state directory's files (SPEC §3.8).
const (
	stateFileName   = "state.db"
	oauthSecretName = "oauth-secret"
)

// defaultStateDir is where the durable state goes unless told: a per-user
// directory under $XDG_STATE_HOME, else ~/.local/state; "" (in memory)
// when neither is set.
func defaultStateDir(env map[string]string) string {
	switch {
	case env["XDG_STATE_HOME"] != "":
		return filepath.Join(env["XDG_STATE_HOME"], "mcpruntime")
	case env["HOME"] != "":
		return filepath.Join(env["HOME"], ".local", "state", "mcpruntime")
	}
	return ""
}

// stateDir is the directory of the durable state, created 0700, or "" to
// keep the state in memory: with --memory, with --etcd (the cluster's
// state is in etcd) or with --state-dir empty. A --state-dir other than
// its default with --memory or --etcd is a usage error, not a silent
// choice between them.
func (s *serveCmd) stateDir(env map[string]string, given map[string]bool, log *slog.Logger) (string, error) {
	named := s.StateDir != "" && (given["state-dir"] || s.StateDir != defaultStateDir(env))
	switch {
	case s.Memory && named:
		return "", usageError{fmt.Errorf("--memory and --state-dir %q: choose one", s.StateDir)}
	case s.clustered() && named:
		return "", usageError{fmt.Errorf("--state-dir %q with --etcd: several nodes keep their state in etcd", s.StateDir)}
	case s.Memory, s.clustered():
		return "", nil
	case s.StateDir == "":
		log.Info("state in memory: threads, client grants and sign-ins end with the process", "reason", "--state-dir is empty")
		return "", nil
	}
	dir, err := filepath.Abs(s.StateDir)
	if err != nil {
		return "", fmt.Errorf("--state-dir %q: %w", s.StateDir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("--state-dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("--state-dir: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("--state-dir %s: not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		log.Warn("state directory is open to other users; its files are 0600, but 0700 keeps even their names private", "dir", dir, "mode", fi.Mode().Perm().String())
	}
	log.Info("state on disk", "dir", dir)
	return dir, nil
}

// stateSecret reads the OAuth secret of the state directory, or generates
// it (32 random bytes, base64url, mode 0600) when there is none yet, so
// that OAuth client ids outlive a restart with the grants they signed in.
func stateSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		raw := make([]byte, 32)
		_, _ = rand.Read(raw) // never fails (crypto/rand)
		secret := base64.RawURLEncoding.EncodeToString(raw)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return stateSecret(path) // another process made it first
		}
		if err != nil {
			return nil, fmt.Errorf("OAuth secret: %w", err)
		}
		_, err = f.WriteString(secret + "\n")
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("OAuth secret: %w", err)
		}
		return []byte(secret), nil
	}
	if err != nil {
		return nil, fmt.Errorf("OAuth secret: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) < 32 {
		return nil, fmt.Errorf("OAuth secret %s: %d bytes, want at least 32 (remove it to have one generated)", path, len(b))
	}
	return b, nil
}

// stateError adds to the runtime's state-file errors what the operator
// can do about each; they already name the file.
func stateError(err error) error {
	switch {
	case errors.Is(err, mcpruntime.ErrStateInUse):
		return fmt.Errorf("%w: another runtime serves this state directory; stop it, or give this one its own --state-dir (or --memory)", err)
	case errors.Is(err, mcpruntime.ErrStateFormat):
		return fmt.Errorf("%w: run the version that wrote it, or start on another --state-dir", err)
	case errors.Is(err, mcpruntime.ErrStateCorrupt):
		return fmt.Errorf("%w: restore a backup (runtime admin backup FILE) into the state directory, or move the file away to start empty", err)
	}
	return err
}
