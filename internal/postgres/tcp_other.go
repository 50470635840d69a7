//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// tcpUserTimeout is Linux-only; elsewhere keepalives alone detect a dead
// peer.
func tcpUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
