package agentproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// PrivateDir creates a new directory under base, readable by its owner
// only (0700), named prefix followed by random characters. A driver keeps
// everything that holds a token in it and removes it with os.RemoveAll
// when the session ends.
func PrivateDir(base, prefix string) (string, error) {
	dir, err := os.MkdirTemp(base, prefix+"*") // mode 0700
	if err != nil {
		return "", fmt.Errorf("private directory: %w", err)
	}
	return dir, nil
}

// WriteFile replaces path's content with data atomically, mode 0600: a
// reader sees the old file or the new one, never half of one, and the
// content is never readable by another user, even for a moment.
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
