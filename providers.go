package mcpruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/memdb"
)

// RegisterInstance registers a provider instance and starts its actor.
// With a state file (Config.StateFile) the instance is kept: after a
// restart it is registered again by itself, and registering it again with
// the same spec (driver, config bytes and capabilities) returns nil; with
// another spec it is ErrInstanceExists, as it is in memory.
func (r *Runtime) RegisterInstance(ctx context.Context, id string, spec InstanceSpec) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	if err := validID("instance", id); err != nil {
		return err
	}
	if r.state != nil {
		if inst, err := r.store.Read().Instance(id); err == nil && r.hasInstance(id) && sameSpec(inst, spec) {
			return nil
		}
	}
	return r.startInstance(ctx, id, spec, r.cfg.Now())
}

func (r *Runtime) hasInstance(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.instances[id] != nil
}

// sameSpec reports whether inst was registered with spec.
func sameSpec(inst *memdb.Instance, spec InstanceSpec) bool {
	return inst.Driver == spec.Driver && bytes.Equal(compactJSON(inst.Config), compactJSON(spec.Config)) &&
		slices.Equal(inst.Capabilities, spec.Capabilities)
}

// compactJSON is raw without insignificant space, nil for none or null: a
// config as the state file gives it back.
func compactJSON(raw []byte) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	if b.Len() == 0 || b.String() == "null" {
		return nil
	}
	return b.Bytes()
}

// startInstance builds the instance's driver and starts its actor, which
// writes its record (created at created) unless the store has it.
func (r *Runtime) startInstance(ctx context.Context, id string, spec InstanceSpec, created time.Time) error {
	drv, err := r.drivers.Build(spec.Driver, id, spec.Config)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // nothing started
	}
	props := provider.Props(provider.Config{
		Instance: memdb.Instance{
			ID: id, Driver: spec.Driver, Config: slices.Clone(spec.Config),
			Capabilities: slices.Clone(spec.Capabilities), Created: created,
		},
		Driver:       drv,
		Store:        r.store,
		Now:          r.cfg.Now,
		OpTimeout:    r.cfg.OpenTimeout,
		ActorTimeout: r.cfg.ActorTimeout,
		IdleRelease:  r.cfg.ProviderIdle,
		Work:         &r.work,
		Base:         r.base,
		Logger:       r.cfg.Logger,
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
	pid, err := r.root.SpawnNamed(props, names.Instance(id))
	if err == nil {
		r.instances[id] = pid
		r.closeTimeouts[id] = driver.CloseTimeout(drv, r.cfg.OpenTimeout)
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("start instance %q: %w", id, err)
	}
	// The actor writes its record when it starts; wait for that.
	_, err = call[*provider.Sessions](ctx, r, target{pid: pid, gone: ErrUnknownInstance}, &provider.GetSessions{}, r.budget(opActor, ""))
	return err
}

// OpenProviderSession opens a provider session of instance for thread, or
// returns the one the pair already has (SPEC §3).
func (r *Runtime) OpenProviderSession(ctx context.Context, threadID, instance string) (ProviderSession, error) {
	t, err := r.threadActor(threadID)
	if err != nil {
		return ProviderSession{}, err
	}
	if err := validID("instance", instance); err != nil {
		return ProviderSession{}, err
	}
	res, err := call[*thread.OpenProviderSessionResult](ctx, r, t, &thread.OpenProviderSession{Instance: instance}, r.budget(opDriver, ""))
	if err != nil {
		return ProviderSession{}, err
	}
	return ProviderSession{
		ID:            res.SessionID,
		CredentialID:  res.CredentialID,
		Endpoint:      res.Endpoint,
		Authorization: res.Authorization,
		Capabilities:  nonNil(res.Capabilities),
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
	rec, err := r.store.Read().ProviderSession(id)
	if err != nil {
		return fmt.Errorf("provider session %q: %w", id, ErrUnknownProviderSession)
	}
	_, err = call[*provider.CloseSessionResult](ctx, r, r.instanceActor(rec.Instance),
		&provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased}, r.budget(opClose, rec.Instance))
	return err
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
		res, err := call[*provider.ReleaseIdleResult](ctx, r, r.instanceActor(id), &provider.ReleaseIdle{}, r.budget(opClose, id))
		if res != nil {
			for _, s := range res.Sessions {
				released = append(released, s.ID)
			}
		}
		errs = append(errs, err)
	}
	slices.Sort(released)
	return released, errors.Join(errs...)
}

// SwitchProvider makes instance the thread's current provider instance.
// No credential changes; an active run of the previous instance ends. An
// agent whose turn that run was is not stopped: it finishes its turn, and
// its mutations are refused from the switch on (SPEC §3.7).
func (r *Runtime) SwitchProvider(ctx context.Context, threadID, instance string) (SwitchResult, error) {
	t, err := r.threadActor(threadID)
	if err != nil {
		return SwitchResult{}, err
	}
	if err := validID("instance", instance); err != nil {
		return SwitchResult{}, err
	}
	res, err := call[*thread.SwitchProviderResult](ctx, r, t, &thread.SwitchProvider{Instance: instance}, r.budget(opActor, ""))
	if err != nil {
		return SwitchResult{}, err
	}
	return SwitchResult{Previous: res.Previous, EndedRun: res.EndedRun}, nil
}

// Rotate mints a new credential for (thread, instance) and revokes the
// previous one. A provider session serving the pair is re-bound to it.
func (r *Runtime) Rotate(ctx context.Context, threadID, instance string) (Credential, error) {
	t, err := r.threadActor(threadID)
	if err != nil {
		return Credential{}, err
	}
	if err := validID("instance", instance); err != nil {
		return Credential{}, err
	}
	res, err := call[*thread.RotateResult](ctx, r, t, &thread.Rotate{Instance: instance}, r.budget(opDriver, ""))
	if err != nil {
		return Credential{}, err
	}
	return Credential{ID: res.CredentialID, Authorization: res.Authorization}, nil
}
