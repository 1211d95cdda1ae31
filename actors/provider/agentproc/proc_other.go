//go:build !unix

package agentproc

import (
	"errors"
	"os"
	"os/exec"
)

var sigTerm = os.Kill

// Supported reports whether agents can run here: process groups need a Unix system.
func Supported() error { return errors.New("agent processes: process groups need a Unix system") }

func setGroup(*exec.Cmd)                     {}
func signalGroup(cmd *exec.Cmd, _ os.Signal) { _ = cmd.Process.Kill() }
func killGroup(cmd *exec.Cmd)                { _ = cmd.Process.Kill() }
