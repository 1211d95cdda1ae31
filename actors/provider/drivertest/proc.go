package drivertest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Group returns the pids of the processes in process group pgid, zombies
// included.
func Group(pgid int) []int { return scanGroup(pgid, true) }

// Live returns the pids of the live processes in process group pgid:
// neither zombies nor dead ones.
func Live(pgid int) []int { return scanGroup(pgid, false) }

func scanGroup(pgid int, zombies bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp …": the fields after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || !zombies && (f[0] == "Z" || f[0] == "X") {
			continue
		}
		if f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// RSSKiB is the resident memory of the processes, summed, in KiB.
func RSSKiB(pids []int) int {
	total := 0
	for _, pid := range pids {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				total += n
			}
		}
	}
	return total
}

// Environ is the environment of a process, NUL-separated.
func Environ(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("environ of %d: %v", pid, err)
	}
	return string(b)
}

// WaitGone waits, up to deadline, until no process is left in group pgid
// (Group: a zombie counts).
func WaitGone(t *testing.T, what string, pgid int, deadline time.Duration) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		left := Group(pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: processes %v of group %d still exist", what, left, pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Token is the bare token of an Authorization value.
func Token(authorization string) string { return strings.TrimPrefix(authorization, "Bearer ") }

// Atoi is s as a number; anything else fails the test.
func Atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
