package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// InprocKind is the kind name of the in-process driver.
const InprocKind = "inproc"

// InprocConfig is the instance configuration of the in-process driver.
type InprocConfig struct {
	// MultiThread makes one session serve every thread of the instance.
	MultiThread bool `json:"multiThread"`
}

// InprocFactory builds the in-process driver of an instance: its sessions
// start no process and hold nothing but the promise to accept every call.
// It is the minimal driver, for hosts that drive their agents themselves
// and for trying the runtime out; tests use providertest.Inproc, which
// records what its sessions were given.
func InprocFactory(instance string, raw json.RawMessage) (Driver, error) {
	var cfg InprocConfig
	if len(raw) > 0 && string(raw) != "null" {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return nil, fmt.Errorf("inproc config: %w", err)
		}
	}
	return inprocDriver{multi: cfg.MultiThread}, nil
}

type inprocDriver struct{ multi bool }

func (d inprocDriver) MultiThread() bool { return d.multi }

func (inprocDriver) Open(ctx context.Context, _ OpenRequest) (Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return inprocSession{}, nil
}

type inprocSession struct{}

func (inprocSession) Attach(context.Context, Binding) error { return nil }
func (inprocSession) Detach(context.Context, string) error  { return nil }
func (inprocSession) Close(context.Context) error           { return nil }
