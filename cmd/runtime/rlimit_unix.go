//go:build unix

package main

import "syscall"

// raiseFileLimit raises the soft limit of open files (RLIMIT_NOFILE) to
// its hard limit, if below, and returns the limits then in force. It
// leaves an equal soft limit alone, so that the Go runtime's own raise
// (at start, undone for child processes) stays the one that applies.
func raiseFileLimit() (soft, hard uint64, raised bool, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, false, err
	}
	if lim.Cur >= lim.Max {
		return uint64(lim.Cur), uint64(lim.Max), false, nil
	}
	want := lim
	want.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return uint64(lim.Cur), uint64(lim.Max), false, err
	}
	return uint64(want.Cur), uint64(want.Max), true, nil
}
