// Package testsupport is for tests only: the one place where Shade's tests
// build the binaries, pick loopback ports, write datasets of known bytes
// and versioned values (AppendVersion), run shade-peer processes, run ip
// for the network namespaces they make, and wait on conditions.
//
// Of this module it imports only the protocol/samplekey leaf (which
// imports nothing of the module and whose tests do not use this package):
// every other package's tests, the internal ones included, can then import
// it without an import cycle. It
// holds no package state; what lives for a whole test process (the built
// binaries) is a value that the test package's TestMain owns.
//
// Everything it starts listens on loopback (127.0.0.1) or on a Unix socket
// in a temporary directory, and every process it starts is signalled by its
// PID, never looked up by name.
package testsupport
