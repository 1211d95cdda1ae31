package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/memdb"
)

// RegisterInstance registers a provider instance and starts its actor.
func (r *Runtime) RegisterInstance(ctx context.Context, id string, spec InstanceSpec) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	if err := validID("instance", id); err != nil {
		return err
	}
	drv, err := r.drivers.Build(spec.Driver, id, spec.Config)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // nothing started
	}
	props := provider.Props(provider.Config{
		Instance: &memdb.Instance{
			ID: id, Driver: spec.Driver, Config: slices.Clone(spec.Config),
			Capabilities: slices.Clone(spec.Capabilities), Created: r.cfg.Now(),
		},
		Driver:      drv,
		Store:       r.store,
		Now:         r.cfg.Now,
		OpTimeout:   r.cfg.OpenTimeout,
		Release:     r.releaseCredentials,
		IdleRelease: r.cfg.ProviderIdle,
		Work:        &r.work,
		Base:        r.base,
		Logger:      r.cfg.Logger,
	})
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.instances[id] != nil {
		r.mu.Unlock()
		return fmt.Errorf("instance %q: %w", id, ErrInstanceExists)
	}
	pid, err := r.root.SpawnNamed(props, instancePrefix+id)
	if err == nil {
		r.instances[id] = pid
		r.closeTimeouts[id] = provider.CloseTimeout(drv, r.cfg.OpenTimeout)
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("start instance %q: %w", id, err)
	}
	// The actor writes its record when it starts; wait for that.
	_, err = ask[*provider.Sessions](ctx, r, pid, &provider.GetSessions{}, r.cfg.ActorTimeout)
	return err
}

// OpenProviderSession opens a provider session of instance for thread, or
// returns the one the pair already has (SPEC §3).
func (r *Runtime) OpenProviderSession(ctx context.Context, threadID, instance string) (ProviderSession, error) {
	pid, err := r.thread(threadID)
	if err != nil {
		return ProviderSession{}, err
	}
	if err := validID("instance", instance); err != nil {
		return ProviderSession{}, err
	}
	res, err := ask[*thread.OpenProviderSessionResult](ctx, r, pid,
		&thread.OpenProviderSession{Instance: instance}, r.cfg.OpenTimeout+2*r.cfg.ActorTimeout)
	if err != nil {
		return ProviderSession{}, err
	}
	if res.Err != nil {
		return ProviderSession{}, res.Err
	}
	return ProviderSession{
		ID:            res.SessionID,
		CredentialID:  res.CredentialID,
		Endpoint:      res.Endpoint,
		Authorization: res.Authorization,
		Capabilities:  res.Capabilities,
		Reused:        res.Reused,
	}, nil
}

// ReleaseProviderSession closes a provider session and revokes the
// credentials it recorded, except those another open provider session
// holds. The revocation comes first: the session's record is removed and
// its tokens stop authenticating before the driver's Close is called, so
// an agent given a grace to stop can do nothing more with them. It
// returns once the driver's Close returned (exec: the process is gone).
func (r *Runtime) ReleaseProviderSession(ctx context.Context, id string) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	rec, err := r.store.Read().ProviderSession(nil, id)
	if err != nil {
		return fmt.Errorf("provider session %q: %w", id, ErrUnknownProviderSession)
	}
	res, err := ask[*provider.CloseSessionResult](ctx, r, r.instancePID(rec.Instance),
		&provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased}, r.closeTimeout(rec.Instance)) // waits for the driver's Close
	if err != nil {
		return err
	}
	return res.Err
}

// closeTimeout bounds a request that waits for the driver's Close of one of
// instance's sessions, its revocation first: the driver's close budget,
// and the actor round trips around it.
func (r *Runtime) closeTimeout(instance string) time.Duration {
	r.mu.Lock()
	d, ok := r.closeTimeouts[instance]
	r.mu.Unlock()
	if !ok {
		d = r.cfg.OpenTimeout
	}
	return d + 2*r.cfg.ActorTimeout
}

// releaseCredentials revokes the credentials a closing provider session
// recorded, except those another open session holds, and returns once
// they no longer authenticate. It is every instance's provider.Config.Release:
// the instance calls it before the driver's Close.
func (r *Runtime) releaseCredentials(ctx context.Context, closed *memdb.ProviderSession) error {
	var errs []error
	for t, creds := range r.credentialsByThread(closed.Credentials) {
		pid := r.threadPID(t)
		if pid == nil {
			continue
		}
		rel, err := ask[*thread.ReleaseCredentialsResult](ctx, r, pid,
			&thread.ReleaseCredentials{SessionID: closed.ID, Credentials: creds}, r.cfg.ActorTimeout)
		switch {
		case err != nil:
			errs = append(errs, err)
		case rel.Err != nil && !errors.Is(rel.Err, ErrUnknownThread):
			errs = append(errs, rel.Err)
		}
	}
	return errors.Join(errs...)
}

// ReleaseIdleProviderSessions releases, now, every provider session idle
// for at least Config.ProviderIdle (instances also do it on their own
// timers, within a quarter of that time) and returns their ids, sorted.
// As with ReleaseProviderSession, their credentials stop authenticating
// (except those another open session holds) before their driver sessions
// are closed; it returns once those are closed.
func (r *Runtime) ReleaseIdleProviderSessions(ctx context.Context) ([]string, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	ids := slices.Sorted(maps.Keys(r.instances))
	r.mu.Unlock()
	var (
		released []string
		errs     []error
	)
	for _, id := range ids {
		res, err := ask[*provider.ReleaseIdleResult](ctx, r, r.instancePID(id), &provider.ReleaseIdle{}, r.closeTimeout(id))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, s := range res.Sessions {
			released = append(released, s.ID)
		}
		errs = append(errs, res.Err)
	}
	ids = released
	slices.Sort(ids)
	return ids, errors.Join(errs...)
}

// credentialsByThread groups credential ids by the thread they belong to.
// Credentials already removed (their thread was deleted) are skipped.
func (r *Runtime) credentialsByThread(ids []string) map[string][]string {
	rd := r.store.Read()
	out := map[string][]string{}
	for _, id := range ids {
		if c, err := rd.Credential(nil, id); err == nil && c.Kind == memdb.KindProvider {
			out[c.Thread] = append(out[c.Thread], id)
		}
	}
	return out
}

// SwitchProvider makes instance the thread's current provider instance.
// No credential changes; an active run of the previous instance ends.
func (r *Runtime) SwitchProvider(ctx context.Context, threadID, instance string) (SwitchResult, error) {
	pid, err := r.thread(threadID)
	if err != nil {
		return SwitchResult{}, err
	}
	if err := validID("instance", instance); err != nil {
		return SwitchResult{}, err
	}
	res, err := ask[*thread.SwitchProviderResult](ctx, r, pid, &thread.SwitchProvider{Instance: instance}, r.cfg.ActorTimeout)
	if err != nil {
		return SwitchResult{}, err
	}
	return SwitchResult{Previous: res.Previous, EndedRun: res.EndedRun}, res.Err
}

// Rotate mints a new credential for (thread, instance) and revokes the
// previous one. A provider session serving the pair is re-bound to it.
func (r *Runtime) Rotate(ctx context.Context, threadID, instance string) (Credential, error) {
	pid, err := r.thread(threadID)
	if err != nil {
		return Credential{}, err
	}
	if err := validID("instance", instance); err != nil {
		return Credential{}, err
	}
	res, err := ask[*thread.RotateResult](ctx, r, pid, &thread.Rotate{Instance: instance}, r.cfg.OpenTimeout+2*r.cfg.ActorTimeout)
	if err != nil {
		return Credential{}, err
	}
	if res.Err != nil {
		return Credential{}, res.Err
	}
	return Credential{ID: res.CredentialID, Authorization: res.Authorization}, nil
}
