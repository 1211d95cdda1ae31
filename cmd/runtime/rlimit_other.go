//go:build !unix

package main

import "errors"

// raiseFileLimit reports that this system has no RLIMIT_NOFILE to raise.
func raiseFileLimit() (soft, hard uint64, raised bool, err error) {
	return 0, 0, false, errors.ErrUnsupported
}
