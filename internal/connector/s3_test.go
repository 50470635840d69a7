package connector_test

import (
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/testenv/s3server"
)

// sharedS3 is one S3 gateway for the package's S3 tests; each test has a
// bucket of its own. It stops when the test process ends (s3server
// tethers it), and its directory is removed.
var sharedS3 struct {
	once sync.Once
	srv  *s3server.Server
	err  error
}

func s3gw(t *testing.T) *s3server.Server {
	t.Helper()
	sharedS3.once.Do(func() { sharedS3.srv, sharedS3.err = s3server.StartTemp() })
	if sharedS3.err != nil {
		t.Fatalf("start the S3 gateway: %v", sharedS3.err)
	}
	return sharedS3.srv
}

// newS3 returns a connector on a fresh bucket of srv, under prefix "in/",
// and the bucket's name.
func newS3(t *testing.T, srv *s3server.Server, edit func(*connector.S3Options)) (*connector.S3, string) {
	t.Helper()
	bucket, err := srv.CreateBucket(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	o := connector.S3Options{
		Endpoint: srv.Endpoint, Region: s3server.Region, Bucket: bucket, Prefix: "in",
		PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Archive: "archive/",
	}
	if edit != nil {
		edit(&o)
	}
	c, err := connector.NewS3(o)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bucket
}

// keys lists every key in bucket, straight from the server.
func bucketKeys(t *testing.T, srv *s3server.Server, bucket string) []string {
	t.Helper()
	out, err := srv.Client().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("ListObjectsV2: %v", err)
	}
	var ks []string
	for _, o := range out.Contents {
		ks = append(ks, aws.ToString(o.Key))
	}
	return ks
}

func TestS3WriteOverwriteMetadataAndRead(t *testing.T) {
	t.Parallel()
	srv := s3gw(t)
	c, bucket := newS3(t, srv, nil)
	ctx := t.Context()
	p := remotePut("acme/2026/x.edi", "first")
	p.Metadata = map[string]string{"partner": "acme", "message-id": "abc@example"}
	if err := c.Write(ctx, p); err != nil {
		t.Fatalf("Write: %v", err)
	}
	p = remotePut("acme/2026/x.edi", "second")
	p.Metadata = map[string]string{"partner": "acme", "message-id": "abc@example"}
	if err := c.Write(ctx, p); err != nil {
		t.Fatalf("Write again: %v", err)
	}
	if diff := cmp.Diff([]string{"in/acme/2026/x.edi"}, bucketKeys(t, srv, bucket)); diff != "" {
		t.Errorf("keys after two writes of one name (-want +got):\n%s", diff)
	}
	head, err := srv.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("in/acme/2026/x.edi")})
	if err != nil {
		t.Fatalf("HeadObject: %v", err)
	}
	if got := aws.ToString(head.ContentType); got != "application/edi-x12" {
		t.Errorf("ContentType = %q, want application/edi-x12", got)
	}
	if diff := cmp.Diff(map[string]string{"partner": "acme", "message-id": "abc@example"}, head.Metadata); diff != "" {
		t.Errorf("Metadata (-want +got):\n%s", diff)
	}
	objs, err := c.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(objs) != 1 || objs[0].Path != "acme/2026/x.edi" || objs[0].Size != 6 || objs[0].ETag == "" || objs[0].ModTime.IsZero() {
		t.Fatalf("List = %+v, want acme/2026/x.edi of 6 bytes with an ETag and a time", objs)
	}
	r, err := c.Open(ctx, objs[0])
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	b, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || string(b) != "second" {
		t.Errorf("Open read %q, %v; want %q", b, err, "second")
	}
	// Replaced since it was listed: the listed ETag no longer matches.
	if err := c.Write(ctx, remotePut("acme/2026/x.edi", "third")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Open(ctx, objs[0]); !errors.Is(err, connector.ErrUnavailable) {
		t.Errorf("Open of an object replaced since listed = %v, want ErrUnavailable", err)
	}
}

// TestS3WriteWholeOrNothing: while a multipart write is under way (a part
// is up), no object of the name exists; a body shorter than its size
// leaves no object at all.
func TestS3WriteWholeOrNothing(t *testing.T) {
	t.Parallel()
	srv := s3gw(t)
	c, bucket := newS3(t, srv, func(o *connector.S3Options) { o.PartSize = 5 << 20; o.PartConcurrency = 1 })
	ctx := t.Context()
	part := strings.Repeat("A", 5<<20)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- c.Write(ctx, connector.Put{Name: "big.edi", Body: pr, Size: -1}) }()
	// The uploader reads a part ahead; after three parts went in, the
	// first is on the server.
	for range 3 {
		if _, err := pw.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if ks := bucketKeys(t, srv, bucket); len(ks) != 0 {
		t.Errorf("during the write the bucket lists %v, want nothing", ks)
	}
	if objs, err := c.List(ctx); err != nil || len(objs) != 0 {
		t.Errorf("List during the write = %v, %v; want nothing", objs, err)
	}
	_ = pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("Write: %v", err)
	}
	objs, err := c.List(ctx)
	if err != nil || len(objs) != 1 || objs[0].Size != 3*5<<20 {
		t.Errorf("List after the write = %+v, %v; want big.edi of %d bytes", objs, err, 3*5<<20)
	}

	p := remotePut("short.edi", "abc")
	p.Size = 10
	if err := c.Write(ctx, p); !errors.Is(err, connector.ErrUnavailable) {
		t.Fatalf("Write of a body shorter than Size = %v, want ErrUnavailable", err)
	}
	if diff := cmp.Diff([]string{"in/big.edi"}, bucketKeys(t, srv, bucket)); diff != "" {
		t.Errorf("after a short write (-want +got):\n%s", diff)
	}
}

func TestS3ListArchiveAndDelete(t *testing.T) {
	t.Parallel()
	srv := s3gw(t)
	c, bucket := newS3(t, srv, nil)
	ctx := t.Context()
	for _, k := range []string{"in/a.edi", "in/sub/b.edi", "in/sub/b.edi.done", "in/.c.edi.tmp-1", "in/archive/old.edi", "out/elsewhere.edi"} {
		if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatal(err)
		}
	}
	objs, done, err := c.ListMarkers(ctx)
	if err != nil {
		t.Fatalf("ListMarkers: %v", err)
	}
	var paths []string
	for _, o := range objs {
		paths = append(paths, o.Path)
	}
	if diff := cmp.Diff([]string{"a.edi", "sub/b.edi"}, paths); diff != "" {
		t.Errorf("List paths (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"sub/b.edi": true}, done); diff != "" {
		t.Errorf("markers (-want +got):\n%s", diff)
	}
	b := connector.Object{Path: "sub/b.edi"}
	for range 2 { // the second: the first's answer was lost
		if err := c.Archive(ctx, b, "archive/"); err != nil {
			t.Fatalf("Archive(sub/b.edi, archive/): %v", err)
		}
	}
	a := connector.Object{Path: "a.edi"}
	for range 2 {
		if err := c.Archive(ctx, a, ""); err != nil {
			t.Fatalf("Archive(a.edi, \"\") (delete): %v", err)
		}
	}
	want := []string{"in/.c.edi.tmp-1", "in/archive/old.edi", "in/archive/sub/b.edi", "out/elsewhere.edi"}
	if diff := cmp.Diff(want, bucketKeys(t, srv, bucket)); diff != "" {
		t.Errorf("keys after archive and delete (-want +got):\n%s", diff)
	}
	if _, err := c.Open(ctx, a); !errors.Is(err, connector.ErrNotFound) {
		t.Errorf("Open of a deleted object = %v, want ErrNotFound", err)
	}
	if err := c.Check(ctx); err != nil {
		t.Errorf("Check = %v", err)
	}
	if diff := cmp.Diff(want, bucketKeys(t, srv, bucket)); diff != "" {
		t.Errorf("Check left an object behind (-want +got):\n%s", diff)
	}
}

func TestS3Refused(t *testing.T) {
	t.Parallel()
	srv := s3gw(t)
	tests := []struct {
		name string
		edit func(*connector.S3Options)
		want string
	}{
		{"wrong secret", func(o *connector.S3Options) { o.SecretKey = "wrong" }, "secret_key_secret"},
		{"unknown access key", func(o *connector.S3Options) { o.AccessKey = "nobody" }, "access_key_secret"},
		{"missing bucket", func(o *connector.S3Options) { o.Bucket = "no-such-bucket" }, "s3.bucket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newS3(t, srv, tt.edit)
			for op, err := range map[string]error{
				"Write": c.Write(t.Context(), remotePut("x.edi", "x")),
				"Check": c.Check(t.Context()),
			} {
				if !errors.Is(err, connector.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s = %v, want ErrRefused naming %q", op, err, tt.want)
				}
			}
		})
	}
}

// TestS3Unavailable: with the server down a write fails as unavailable;
// back up, the same connector writes again.
func TestS3Unavailable(t *testing.T) {
	t.Parallel()
	srv, err := s3server.Start(t.TempDir())
	if err != nil {
		t.Fatalf("start the S3 gateway: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c, bucket := newS3(t, srv, nil)
	ctx := t.Context()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, remotePut("one.edi", "1")); !errors.Is(err, connector.ErrUnavailable) {
		t.Fatalf("Write with the server down = %v, want ErrUnavailable", err)
	}
	if _, err := c.List(ctx); !errors.Is(err, connector.ErrUnavailable) {
		t.Fatalf("List with the server down = %v, want ErrUnavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, remotePut("one.edi", "1")); err != nil {
		t.Fatalf("Write after the server is back: %v", err)
	}
	if diff := cmp.Diff([]string{"in/one.edi"}, bucketKeys(t, srv, bucket)); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

func TestNewS3Validates(t *testing.T) {
	tests := []struct {
		name string
		give connector.S3Options
		want string
	}{
		{"no bucket", connector.S3Options{}, "s3.bucket"},
		{"half the keys", connector.S3Options{Bucket: "b", AccessKey: "id"}, "secret_key_secret"},
		{"small parts", connector.S3Options{Bucket: "b", PartSize: 1 << 20}, "5 MiB"},
	}
	for _, tt := range tests {
		_, err := connector.NewS3(tt.give)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewS3(%s) = %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
}
