package main

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: a server
// that run started must be gone once run returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runCLI runs the program in-process and returns its exit status and output.
func runCLI(ctx context.Context, env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	if env == nil {
		env = map[string]string{}
	}
	code = run(ctx, args, env, &out, &errb)
	return code, out.String(), errb.String()
}
