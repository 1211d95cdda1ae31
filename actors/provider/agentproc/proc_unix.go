//go:build unix

package agentproc

import (
	"os/exec"
	"syscall"
)

const sigTerm = syscall.SIGTERM

// Supported reports whether agents can run here: process groups need a Unix system.
func Supported() error { return nil }

// setGroup starts the process as the leader of a new process group, so
// signals reach its children too.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup signals the process's group.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	_ = syscall.Kill(-cmd.Process.Pid, sig) // ESRCH: the group is gone already
}

// killGroup kills every process left in the group.
func killGroup(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGKILL) }
