// Package container holds shade-peer's container image (Dockerfile) and a
// test of its build line.
package container
