package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestPeerSilent(t *testing.T) {
	const d = 10 * time.Second
	tests := []struct {
		name string
		give tcpSample
		want bool
	}{
		{"idle, all acknowledged", tcpSample{lastAckRecv: time.Minute}, false},
		{"data in flight, acknowledged lately", tcpSample{unacked: 3, lastAckRecv: time.Second}, false},
		{"data in flight, nothing acknowledged for d", tcpSample{unacked: 3, lastAckRecv: d}, true},
		{"window closed, probes answered", tcpSample{lastAckRecv: 30 * time.Second}, false},
		{"window closed, a probe unanswered, last answer within d", tcpSample{probes: 1, lastAckRecv: 2 * time.Second}, false},
		{"window closed, a probe unanswered for d", tcpSample{probes: 1, lastAckRecv: d + time.Millisecond}, true},
	}
	for _, tt := range tests {
		if got := peerSilent(tt.give, d); got != tt.want {
			t.Errorf("%s: peerSilent(%+v, %s) = %v, want %v", tt.name, tt.give, d, got, tt.want)
		}
	}
}

// inPrivateNetwork runs f on a thread in a new network namespace with only
// its loopback interface up, and returns a function that takes that
// interface down (every packet is then lost: a peer gone without a word).
// The thread is never given back to other goroutines.
func inPrivateNetwork(t *testing.T, f func(down func())) {
	t.Helper()
	fatal := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // and never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			fatal <- "unshare a network namespace (the test needs CAP_SYS_ADMIN): " + err.Error()
			return
		}
		setLo := func(up bool) error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			ifr, err := unix.NewIfreq("lo")
			if err != nil {
				return err
			}
			if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
				return err
			}
			flags := ifr.Uint16()
			if up {
				flags |= unix.IFF_UP
			} else {
				flags &^= unix.IFF_UP
			}
			ifr.SetUint16(flags)
			return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
		}
		if err := setLo(true); err != nil {
			fatal <- "bring up loopback: " + err.Error()
			return
		}
		f(func() {
			if err := setLo(false); err != nil {
				t.Errorf("take loopback down: %v", err)
			}
		})
	}()
	<-done
	select {
	case msg := <-fatal:
		t.Fatal(msg)
	default:
	}
}

// TestDeadPeerDialer: a connection from deadPeerDialer survives a peer that
// stops reading for several dead-peer timeouts (its kernel still answers),
// and is closed, with the reason, once the peer answers nothing at all:
// while data is in flight, and while the peer's window is closed.
func TestDeadPeerDialer(t *testing.T) {
	const d = 3 * time.Second
	tests := []struct {
		name string
		// stallFor: the peer stops reading for this long, then reads again.
		stallFor time.Duration
		// dieAfter: the network goes down this long after the peer
		// stopped reading (0: never).
		dieAfter time.Duration
		wantDead bool
	}{
		{name: "stalled, alive", stallFor: 3 * d},
		{name: "dead with data in flight", dieAfter: time.Millisecond, stallFor: time.Hour, wantDead: true},
		{name: "dead with its window closed", dieAfter: 2 * d, stallFor: time.Hour, wantDead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inPrivateNetwork(t, func(down func()) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Error(err)
					return
				}
				defer ln.Close()
				accepted := make(chan net.Conn, 1)
				go func() {
					c, err := ln.Accept()
					if err != nil {
						close(accepted)
						return
					}
					accepted <- c
				}()
				c, err := deadPeerDialer(5*time.Second, d)(context.Background(), "tcp", ln.Addr().String())
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				if _, ok := c.(*watchedConn); !ok {
					t.Errorf("dialled %T, want *watchedConn", c)
					return
				}
				peer, ok := <-accepted
				if !ok {
					t.Error("accept failed")
					return
				}
				defer peer.Close()

				// The client writes without end; the peer reads nothing
				// (window closes) until stallFor, then everything.
				wrote := make(chan error, 1)
				go func() {
					buf := make([]byte, 64<<10)
					for {
						if _, err := c.Write(buf); err != nil {
							wrote <- err
							return
						}
					}
				}()
				if tt.dieAfter > 0 {
					time.Sleep(tt.dieAfter)
					down()
				}
				select {
				case err := <-wrote:
					if !tt.wantDead {
						t.Errorf("write to a peer that stalled %s = %v, want none", tt.stallFor, err)
					} else if !strings.Contains(err.Error(), "acknowledged nothing") {
						t.Errorf("write to a dead peer = %v, want the watch's reason", err)
					}
					return
				case <-time.After(tt.stallFor):
				}
				if tt.wantDead {
					t.Errorf("write to a dead peer still going after %s", tt.stallFor)
					return
				}
				// The peer resumes: bytes flow again.
				if _, err := io.CopyN(io.Discard, peer, 16<<20); err != nil {
					t.Errorf("read after the stall: %v", err)
				}
				select {
				case err := <-wrote:
					t.Errorf("write after the stall = %v, want none", err)
				default:
				}
				_ = c.Close()
				if err := <-wrote; err == nil || !errors.Is(err, net.ErrClosed) {
					t.Errorf("write after Close = %v, want net.ErrClosed", err)
				}
			})
		})
	}
}
