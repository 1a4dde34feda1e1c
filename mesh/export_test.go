package mesh

// Hooks for this package's tests; they are not part of Node's API.

// kill stops the node abruptly, as a crash would: no leave message, no
// drain. For tests of failure handling.
func (n *Node) kill() {
	if n.closed.Swap(true) {
		return
	}
	n.cancel()
	n.readAhead.Close()
	if c := n.cluster; c != nil {
		c.list.Close()
		c.wire.Close()
	}
	n.bg.Wait()
	n.polMu.Lock()
	n.store.Close()
	n.polMu.Unlock()
}
