package s3server_test

import (
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/testenv/s3server"
)

// TestStartWithoutBinaryNamesTheScript: a machine without the gateway
// fails the test with the command that builds it, instead of skipping.
func TestStartWithoutBinaryNamesTheScript(t *testing.T) {
	t.Setenv("EDIHUB_VERSITYGW_BIN", t.TempDir())
	_, err := s3server.Start(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "scripts/versitygw-build.sh") {
		t.Fatalf("Start without the binary = %v, want an error naming scripts/versitygw-build.sh", err)
	}
}

// TestStartStopRestart: the gateway answers, stops, and comes back on the
// same port with its buckets.
func TestStartStopRestart(t *testing.T) {
	srv, err := s3server.Start(t.TempDir())
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	bucket, err := srv.CreateBucket(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client().ListBuckets(t.Context(), nil); err == nil {
		t.Fatal("ListBuckets with the gateway stopped succeeded")
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	out, err := srv.Client().ListBuckets(t.Context(), nil)
	if err != nil {
		t.Fatalf("ListBuckets after Restart: %v", err)
	}
	if len(out.Buckets) != 1 || *out.Buckets[0].Name != bucket {
		t.Errorf("buckets after Restart = %v, want [%s]", out.Buckets, bucket)
	}
}
