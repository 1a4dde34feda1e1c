//go:build !unix

package peer

import "net"

// udpBuffers cannot read the buffer sizes on this platform.
func udpBuffers(*net.UDPConn) (recv, send int, ok bool) { return 0, 0, false }
