package connectors_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edihub/edihub/internal/testenv"
)

// Live.Run starts goroutines: every test that runs it must stop them.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// hostKey is an SFTP server's public host key (ssh-keygen -t ed25519).
const hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHlKgH8UGeZmdyGvVrNmphgjrIlDJVtlWilKe/ImQVFl"

// docV1 and docV2 are two revisions of a document: v2 changes the
// folder path, adds a destination and a route, and reorders nothing.
const docV1 = `destinations:
  - name: erp-inbox
    type: folder
    folder: {path: erp/inbox}
routes:
  - name: all
    to: [erp-inbox]
`

const docV2 = `destinations:
  - name: erp-inbox
    type: folder
    folder: {path: erp/in}
  - name: erp-sftp
    type: sftp
    sftp: {host: sftp.example.com, user: edi, key_secret: sftp-key, host_key: "` + hostKey + `"}
routes:
  - name: acme
    match: {partners: [acme]}
    to: [erp-sftp]
  - name: all
    to: [erp-inbox]
`

// dirs makes a secrets directory holding sftp-key and a folders
// directory.
func dirs(t *testing.T) (secrets, folders string) {
	t.Helper()
	secrets, folders = t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "sftp-key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	return secrets, folders
}
