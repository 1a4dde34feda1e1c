//go:build unix

package peer

import (
	"net"
	"syscall"
)

// udpBuffers returns the kernel's receive and send buffer sizes of c, as
// getsockopt reports them (on Linux twice what was asked for: the kernel
// counts its bookkeeping), and whether they could be read.
func udpBuffers(c *net.UDPConn) (recv, send int, ok bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var rerr, serr error
	if err := raw.Control(func(fd uintptr) {
		recv, rerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		send, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	}); err != nil || rerr != nil || serr != nil {
		return 0, 0, false
	}
	return recv, send, true
}
