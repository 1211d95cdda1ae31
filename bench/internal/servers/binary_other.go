//go:build !linux

package servers

import "syscall"

// childAttr: no parent-death signal outside Linux; Close ends the child.
func childAttr() *syscall.SysProcAttr { return nil }
