//go:build !linux

package peer

import (
	"errors"
	"testing"
)

// vethPair skips: network namespaces are Linux's.
func vethPair(t testing.TB, mtu int) (ns, addr [2]string) {
	t.Skip("skipped: network namespaces are Linux's")
	return ns, addr
}

// inNetns fails: network namespaces are Linux's.
func inNetns(ns string, fn func() error) error {
	return errors.New("network namespaces are Linux's")
}

// listenIn fails the test: network namespaces are Linux's.
func listenIn(t testing.TB, ns, dir, name, addr string, h Handler) *Node {
	t.Fatal("network namespaces are Linux's")
	return nil
}
