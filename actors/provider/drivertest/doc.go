// Package drivertest is a runtime on loopback with one agent driver, for
// that driver's tests: the runtime (Env) serving MCP on an httptest server
// with the driver's factory registered behind a recorder, the scripted
// model, a captured log (Capture), the waits on a thread and a turn, the
// /proc reads of an agent's process group, and the TestMain (Main) that
// fails a package which leaves a goroutine or an agent process behind.
//
// What differs between drivers is a parameter (Options): the factory and
// kind, the instance configuration, the log message naming a started
// process's pid, the tests' deadline. What is one driver's own stays in
// its package.
package drivertest
