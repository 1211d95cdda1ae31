//go:build unix

package execdriver

import (
	"os/exec"
	"syscall"
)

const sigTerm = syscall.SIGTERM

func supported() error { return nil }

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
