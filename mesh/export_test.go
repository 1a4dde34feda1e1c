package mesh

// Hooks for this package's tests; they are not part of Node's API.

// kill stops the node abruptly, as a crash would: no leave message, no
// drain. For tests of failure handling.
func (n *Node) kill() {
	if n.closed.Swap(true) {
		return
	}
	n.stop()
	n.polMu.Lock()
	n.store.Close()
	n.polMu.Unlock()
}
