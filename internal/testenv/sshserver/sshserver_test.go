package sshserver_test

import (
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/edihub/edihub/internal/testenv/sshserver"
)

// TestStartStopRestart: sshd accepts the user key and pins to its host
// key, stops (its listener gone), and comes back with the same key.
func TestStartStopRestart(t *testing.T) {
	srv, err := sshserver.Start(t.TempDir())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	login := func() error {
		signer, err := ssh.ParsePrivateKey(srv.UserKey)
		if err != nil {
			t.Fatal(err)
		}
		host, _, _, _, err := ssh.ParseAuthorizedKey([]byte(srv.HostKey))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ssh.Dial("tcp", srv.Addr(), &ssh.ClientConfig{
			User: srv.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(host),
		})
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	if err := login(); err != nil {
		t.Fatalf("login: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := login(); err == nil {
		t.Fatal("login with sshd stopped succeeded")
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := login(); err != nil {
		t.Fatalf("login after Restart: %v", err)
	}
}
