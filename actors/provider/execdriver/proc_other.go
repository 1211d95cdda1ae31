//go:build !unix

package execdriver

import (
	"errors"
	"os"
	"os/exec"
)

var sigTerm = os.Kill

func supported() error { return errors.New("exec driver: process groups need a Unix system") }

func setGroup(*exec.Cmd)                     {}
func signalGroup(cmd *exec.Cmd, _ os.Signal) { _ = cmd.Process.Kill() }
func killGroup(cmd *exec.Cmd)                { _ = cmd.Process.Kill() }
