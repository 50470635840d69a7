//go:build !linux

package postgres

import (
	"errors"
	"net"
)

// tcpState is Linux-only; elsewhere keepalives alone detect a dead peer.
func tcpState(*net.TCPConn) (tcpSample, error) {
	return tcpSample{}, errors.ErrUnsupported
}

// watchable reports whether tcpState works here.
const watchable = false
