package connector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// List returns the objects under the prefix, leaving out the Archive
// folder, dot names and markers (NAME.done; see ListMarkers). Object.ETag
// is the entity tag without quotes.
func (s *S3) List(ctx context.Context) ([]Object, error) {
	objs, _, err := s.ListMarkers(ctx)
	return objs, err
}

// ListMarkers is List, and also the set of listed paths whose marker
// (NAME.done) is present, for a source that waits for markers.
func (s *S3) ListMarkers(ctx context.Context) ([]Object, map[string]bool, error) {
	var objs []Object
	done := map[string]bool{}
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.opts.Bucket),
		Prefix: aws.String(s.opts.Prefix),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, s.classify(ctx, "list", s.opts.Prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			rel := strings.TrimPrefix(key, s.opts.Prefix)
			if rel == "" || strings.HasSuffix(rel, "/") {
				continue // a folder placeholder
			}
			file, marked := remoteListed(rel, s.opts.Archive)
			switch {
			case marked != "":
				done[marked] = true
			case file != "":
				objs = append(objs, Object{
					Path:    file,
					Size:    aws.ToInt64(o.Size),
					ModTime: aws.ToTime(o.LastModified),
					ETag:    strings.Trim(aws.ToString(o.ETag), `"`),
				})
			}
		}
	}
	return objs, done, nil
}

// Open reads o from its start, streamed. When o.ETag is set the object
// must still have it: an object replaced since it was listed fails with
// ErrUnavailable (the next listing sees the new one).
func (s *S3) Open(ctx context.Context, o Object) (io.ReadCloser, error) {
	key, err := s.key(o.Path)
	if err != nil {
		return nil, err
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(key)}
	if o.ETag != "" {
		in.IfMatch = aws.String(`"` + o.ETag + `"`)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		err = s.classify(ctx, "get", key, err)
		if errors.Is(err, ErrRefused) && strings.Contains(err.Error(), "PreconditionFailed") {
			return nil, fmt.Errorf("%w: s3 get %s: the object changed since it was listed", ErrUnavailable, s.url(key))
		}
		return nil, err
	}
	return out.Body, nil
}

// Archive copies o to the archive path to (see remoteArchivePath) and deletes
// it; with to empty it deletes o. Its marker (NAME.done), if any, is
// deleted too. An object already gone is not an error. Objects over 5 GiB
// (one CopyObject's limit) cannot be archived: such a source needs
// after: delete.
func (s *S3) Archive(ctx context.Context, o Object, to string) error {
	key, err := s.key(o.Path)
	if err != nil {
		return err
	}
	if to != "" {
		target, err := s.key(remoteArchivePath(o, to))
		if err != nil {
			return err
		}
		if o.Size > s3MaxCopy {
			return fmt.Errorf("%w: s3 archive %s: %d bytes is over the 5 GiB one copy can move: set the source's after: delete", ErrRefused, s.url(key), o.Size)
		}
		_, err = s.client.CopyObject(ctx, &s3.CopyObjectInput{
			Bucket:     aws.String(s.opts.Bucket),
			Key:        aws.String(target),
			CopySource: aws.String(s3CopySource(s.opts.Bucket, key)),
		})
		if err = s.classify(ctx, "copy", key, err); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("archive to %s: %w", s.url(target), err)
		}
	}
	for _, k := range []string{key, key + remoteMarkerSuffix} {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(k)})
		if err = s.classify(ctx, "delete", k, err); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}

// s3CopySource is CopyObject's "bucket/key", each segment URL-escaped.
func s3CopySource(bucket, key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return bucket + "/" + strings.Join(parts, "/")
}

// s3SizedReader fails at the end of a body whose length is not the size
// announced (size < 0: any length), so the upload is abandoned instead of
// completing with a partial document.
type s3SizedReader struct {
	r    io.Reader
	size int64
	n    int64
}

func (c *s3SizedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.size >= 0 && (c.n > c.size || (err == io.EOF && c.n != c.size)) {
		return n, fmt.Errorf("%w: the document had %d bytes or more, %d were expected", ErrUnavailable, c.n, c.size)
	}
	return n, err
}
