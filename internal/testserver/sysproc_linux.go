package testserver

import "syscall"

// sysProcAttr makes the kernel kill a child process when the test binary
// dies without running its cleanups (a panic, a -timeout, SIGKILL).
//
// Strictly, Pdeathsig fires when the thread that started the child exits.
// The Go runtime ends a thread only when a goroutine exits while locked to it
// with runtime.LockOSThread, which the tests using this package do not do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
