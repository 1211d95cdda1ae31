package servers

import "syscall"

// childAttr makes the kernel send the shipped binary SIGTERM should the
// adapter die without closing it (Pdeathsig: when the thread that started
// it exits, which for Go's threads is the process's end), so that no
// benchmark server outlives its run.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
