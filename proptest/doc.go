// Package proptest holds the model-based property tests of the whole
// runtime: rapid state machines that drive the public API of package
// mcpruntime with random sequences of lifecycle operations and compare every
// answer with a plain model (maps and slices that share no code with the
// runtime), checking the invariants of SPEC §6 after every step.
//
// The package has no non-test code. Run the machines with
//
//	go test -race ./proptest/ -run 'Prop|Machine'
//
// and hunt for bugs with more checks, e.g. -rapid.checks=1000. Minimal
// failing cases that rapid finds are kept as plain tests in regress_test.go.
package proptest
