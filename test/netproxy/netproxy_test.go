package netproxy

import (
	"bufio"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes lines back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return line, err
}

func TestCutBlackholesAndRestoreResumes(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before cut: %q, %v", got, err)
	}

	p.Cut()
	if got, err := roundTrip(c, r, "two", 300*time.Millisecond); err == nil {
		t.Fatalf("during cut: got %q, want a timeout", got)
	}
	// A new connection is accepted but nothing comes back.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial during cut: %v (want accepted)", err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if got, err := roundTrip(c2, r2, "x", 300*time.Millisecond); err == nil {
		t.Fatalf("new connection during cut: got %q, want a timeout", got)
	}

	p.Restore()
	// The held bytes flow once the cut ends.
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after restore: %q, %v; want the held line", got, err)
	}
	if got, err := roundTrip(c, r, "three", 5*time.Second); err != nil || got != "three\n" {
		t.Fatalf("after restore: %q, %v", got, err)
	}
}

func TestResetClosesConnections(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, "one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if _, err := roundTrip(c, r, "two", 5*time.Second); err == nil {
		t.Fatal("connection still works after Reset")
	}
}

func TestCloseDuringCut(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.Cut()
	c.Write([]byte("held\n"))
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestSetTargetRepointsNewConnections(t *testing.T) {
	// Two echo servers told apart by a prefix the second one adds.
	first := echoServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append([]byte("second "), append(sc.Bytes(), '\n')...)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	p, err := Start(first)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldR := bufio.NewReader(old)
	if got, err := roundTrip(old, oldR, "a", 5*time.Second); err != nil || got != "a\n" {
		t.Fatalf("before SetTarget: %q, %v; want the first server's echo", got, err)
	}
	p.SetTarget(ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, bufio.NewReader(c), "b", 5*time.Second); err != nil || got != "second b\n" {
		t.Fatalf("new connection after SetTarget: %q, %v; want the second server's answer", got, err)
	}
	if got, err := roundTrip(old, oldR, "c", 5*time.Second); err != nil || got != "c\n" {
		t.Fatalf("old connection after SetTarget: %q, %v; want it still on the first server", got, err)
	}
}
