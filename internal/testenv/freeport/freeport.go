// Package freeport picks free TCP ports on 127.0.0.1 for servers that a
// test or the local stack starts as child processes, which bind them
// later.
//
// A port is free when it is picked; another process may still take it
// before the child binds it. The kernel's ephemeral ports (those it gives
// to a listener on port 0 and to every outgoing connection, 32768–60999
// by default) are taken all the time on a busy machine, so ports are
// picked at random below that range (from 10000 on, above the ports of
// the local stack), where only a server asking for that very port takes
// one. And a port is never returned twice in one process.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// low is the lowest port picked.
const low = 10000

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= low+1000 {
		return 32768
	}
	return n
}

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// Ports returns n distinct free ports, none returned before in this
// process.
func Ports(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	top := ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, errors.New("freeport: no free port that was not handed out before")
		}
		p := low + rand.IntN(top-low)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken: another one
		}
		l.Close()
		if !handedOut.ports[p] {
			handedOut.ports[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// Port returns one free port, never returned before in this process.
func Port() (int, error) {
	ps, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// Addr returns a free 127.0.0.1 address, its port never returned before in
// this process.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}
