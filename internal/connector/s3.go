package connector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// S3Options configure an S3 destination or source.
type S3Options struct {
	// Endpoint is the URL of an S3-compatible server; empty is AWS.
	Endpoint string
	Region   string // required by the request signature; us-east-1 when empty
	Bucket   string
	// Prefix is the folder in the bucket that names are relative to
	// ("inbound/"); a missing trailing slash is added.
	Prefix string
	// PathStyle addresses the bucket in the path (most S3-compatible
	// servers) instead of the host name (AWS).
	PathStyle bool
	// AccessKey and SecretKey are static credentials. Both empty: the
	// SDK's default chain (environment, web identity token — a pod's
	// workload identity —, shared config, instance role).
	AccessKey, SecretKey string
	// Archive is the folder, relative to Prefix, that List leaves out.
	Archive string
	// Timeout bounds each request but the streaming of a body; 30 s when
	// zero.
	Timeout time.Duration
	// PartSize is the part size of multipart uploads (16 MiB when zero):
	// a body larger than one part goes up in parts, PartConcurrency (2
	// when zero) at a time, so Write holds about
	// (PartConcurrency+1)×PartSize of memory whatever the body's size.
	PartSize        int64
	PartConcurrency int
}

// S3 is a Destination and a Source on an S3 bucket. It is safe for
// concurrent use.
type S3 struct {
	opts      S3Options
	client    *s3.Client
	uploader  *manager.Uploader
	transport *http.Transport
}

var _ interface {
	Destination
	Source
} = (*S3)(nil)

// s3MaxCopy is the largest object one CopyObject copies.
const s3MaxCopy = 5 << 30

// NewS3 validates o and returns an S3 connector. Without static
// credentials it resolves the SDK's default chain here (no request is
// made yet).
func NewS3(o S3Options) (*S3, error) {
	if o.Bucket == "" {
		return nil, errors.New("s3: bucket is empty: set the connector's s3.bucket")
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return nil, errors.New("s3: set both s3.access_key_secret and s3.secret_key_secret, or neither (the SDK's default chain: workload identity)")
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.PartSize == 0 {
		o.PartSize = 8 << 20
	}
	if o.PartSize < manager.MinUploadPartSize {
		return nil, fmt.Errorf("s3: part size %d below S3's minimum of 5 MiB", o.PartSize)
	}
	if o.PartConcurrency == 0 {
		o.PartConcurrency = 2
	}
	loads := []func(*config.LoadOptions) error{config.WithRegion(o.Region)}
	if o.AccessKey != "" {
		loads = append(loads, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), loads...)
	if err != nil {
		return nil, fmt.Errorf("s3: load the SDK's configuration: %w", err)
	}
	// The response header timeout bounds each request without cutting
	// a long body short.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = o.Timeout
	transport.MaxIdleConnsPerHost = 8
	httpClient := &http.Client{Transport: transport}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
		so.HTTPClient = httpClient
		// Checksums only where S3 requires them: S3-compatible servers
		// differ in which trailing checksums they take.
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	uploader := manager.NewUploader(client, func(u *manager.Uploader) {
		u.PartSize = o.PartSize
		u.Concurrency = o.PartConcurrency
	})
	return &S3{opts: o, client: client, uploader: uploader, transport: transport}, nil
}

func (s *S3) key(name string) (string, error) {
	clean, err := remoteRelName(name)
	if err != nil {
		return "", err
	}
	return s.opts.Prefix + clean, nil
}

func (s *S3) url(key string) string { return "s3://" + s.opts.Bucket + "/" + key }

// Write stores p under p.Name in one request, or as a multipart upload
// when the body is larger than a part: either way the object appears when
// the last request completes, whole, and replaces an object of that name.
// ContentType and Metadata are set on the object.
func (s *S3) Write(ctx context.Context, p Put) error {
	key, err := s.key(p.Name)
	if err != nil {
		return err
	}
	in := &s3.PutObjectInput{
		Bucket:   aws.String(s.opts.Bucket),
		Key:      aws.String(key),
		Metadata: p.Metadata,
	}
	if p.ContentType != "" {
		in.ContentType = aws.String(p.ContentType)
	}
	in.Body = &s3SizedReader{r: p.Body, size: p.Size}
	if _, err := s.uploader.Upload(ctx, in); err != nil {
		return s.classify(ctx, "put", key, err)
	}
	return nil
}

// Check verifies the bucket can be reached and written to: it puts and
// deletes a dot object under the prefix.
func (s *S3) Check(ctx context.Context) error {
	// ListObjectsV2 rather than HeadBucket: a HEAD answer has no body
	// to tell a missing bucket from refused credentials.
	if _, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.opts.Bucket), Prefix: aws.String(s.opts.Prefix), MaxKeys: aws.Int32(1),
	}); err != nil {
		return s.classify(ctx, "list", s.opts.Prefix, err)
	}
	probe := s.opts.Prefix + ".edihub-check-" + strings.TrimPrefix(remoteTempName("x"), ".x.tmp-")
	if _, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.opts.Bucket), Key: aws.String(probe), Body: strings.NewReader(""),
	}); err != nil {
		return s.classify(ctx, "put", probe, err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(probe)})
	return s.classify(ctx, "delete", probe, err)
}

// Close closes the idle connections to the server; calls in flight go on.
func (s *S3) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// s3CredentialCodes are the error codes of refused credentials (the last
// is Versity's gateway's for an unknown access key).
var s3CredentialCodes = map[string]bool{
	"AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "XAdminUserNotFound": true,
}

// classify wraps err from an S3 call with the sentinel that fits.
func (s *S3) classify(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	where := s.url(key)
	var apiErr smithy.APIError
	code := ""
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	status := 0
	var respErr *awshttp.ResponseError
	if errors.As(err, &respErr) {
		status = respErr.HTTPStatusCode()
	}
	switch {
	case code == "NoSuchBucket":
		return fmt.Errorf("%w: s3 %s %s: bucket %q does not exist: check s3.bucket and s3.endpoint: %w", ErrRefused, op, where, s.opts.Bucket, err)
	case code == "NoSuchKey" || (status == http.StatusNotFound && key != "" && (code == "" || code == "NotFound")):
		return fmt.Errorf("%w: s3 %s %s: %w", ErrNotFound, op, where, err)
	case s3CredentialCodes[code] || status == http.StatusForbidden:
		return fmt.Errorf("%w: s3 %s %s: access denied: check s3.access_key_secret and s3.secret_key_secret (or the pod's role) and the bucket's policy: %w", ErrRefused, op, where, err)
	case status == http.StatusNotFound:
		return fmt.Errorf("%w: s3 %s %s: bucket %q not found: check s3.bucket and s3.endpoint: %w", ErrRefused, op, where, s.opts.Bucket, err)
	case status == http.StatusTooManyRequests || status >= 500 || code == "SlowDown":
		return fmt.Errorf("%w: s3 %s %s: the server answered %d %s: %w", ErrUnavailable, op, where, status, code, err)
	case status >= 400:
		return fmt.Errorf("%w: s3 %s %s: the server refused the request (%d %s): %w", ErrRefused, op, where, status, code, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: s3 %s %s: %w", ErrUnavailable, op, where, ctx.Err())
	}
	return fmt.Errorf("%w: s3 %s %s: %w", ErrUnavailable, op, where, err)
}
