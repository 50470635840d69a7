package postgres

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// tcpState reads what peerSilent needs from the kernel's TCP_INFO of c.
func tcpState(c *net.TCPConn) (tcpSample, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return tcpSample{}, err
	}
	var (
		info *unix.TCPInfo
		ierr error
	)
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return tcpSample{}, err
	}
	if ierr != nil {
		return tcpSample{}, ierr
	}
	return tcpSample{
		unacked:     info.Unacked,
		probes:      info.Probes,
		lastAckRecv: time.Duration(info.Last_ack_recv) * time.Millisecond,
	}, nil
}

// watchable reports whether tcpState works here.
const watchable = true
