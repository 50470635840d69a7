// Package freeport picks free TCP ports on 127.0.0.1 for servers that a
// test or the local stack starts as child processes, which bind them
// later.
//
// A port is free when it is picked; another process may still take it
// before the child binds it, which is rare. What is not rare is the
// kernel handing out again a port whose listener was just closed: two
// servers started one after the other would then get the same port. So
// a port is never returned twice in one process.
package freeport

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

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
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, errors.New("freeport: no free port that was not handed out before")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
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
