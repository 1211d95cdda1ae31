package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// setupDemo creates the demo thread and instance, opens the provider
// session, starts a run, and returns the session's Authorization value.
//
// On several nodes every node registers its own instance demo (instances
// are per node), and the thread is created once: a node that finds it
// made by another (ErrThreadExists, then ErrNotHome) logs it and returns
// "" — the demo credential is its home node's. A node restarted with the
// same id finds the thread at home and opens a session on it again, and
// so does a single node restarted on its state directory (the restart
// ended the thread's run and revoked its old credential).
func setupDemo(ctx context.Context, rt *mcpruntime.Runtime, log *slog.Logger) (string, error) {
	clustered := rt.Node().ID != ""
	if err := rt.RegisterInstance(ctx, "demo", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		return "", err
	}
	if _, err := rt.CreateThread(ctx, "demo", mcpruntime.ThreadOptions{Instance: "demo"}); err != nil {
		if !errors.Is(err, mcpruntime.ErrThreadExists) {
			return "", err
		}
		// Made by another node, or by this one before a restart on its
		// state directory: the thread is reused, its messages kept.
		log.Info("demo thread exists already", "thread", "demo")
	}
	ps, err := rt.OpenProviderSession(ctx, "demo", "demo")
	if nh, ok := errors.AsType[*mcpruntime.NotHomeError](err); ok {
		log.Info("demo thread lives on another node; no demo credential on this one", "thread", "demo", "home", nh.Home)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if _, err := rt.StartRun(ctx, "demo", "demo"); err != nil && !(clustered && errors.Is(err, mcpruntime.ErrRunActive)) {
		return "", err
	}
	return ps.Authorization, nil
}

// demoCredentialName is the demo credential's file, beside the admin
// token's.
const demoCredentialName = "demo-authorization"

// writeDemoCredential writes the demo's Authorization value to a 0600 file
// at a stable place a user can find: demo-authorization beside the admin
// token file (whether or not the token came from the environment), or, with
// no token file setting, in a new temporary directory. remove takes it away
// at exit, unless another server has replaced it since.
func writeDemoCredential(tokenFile, auth string) (path string, remove func(), err error) {
	if tokenFile != "" {
		path = filepath.Join(filepath.Dir(tokenFile), demoCredentialName)
		if err := writeSecretFile(path, auth); err != nil {
			return "", nil, err
		}
		return path, func() { removeSecretFile(path, auth) }, nil
	}
	dir, err := os.MkdirTemp("", "mcpruntime-demo-")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, demoCredentialName)
	if err := os.WriteFile(path, []byte(auth+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { os.RemoveAll(dir) }, nil
}
