// Package connector moves documents between edihub and the places back
// offices read and write files: a mounted folder, an SFTP server, an S3
// bucket, an HTTP endpoint.
//
// A Destination receives documents edihub took from partners (a delivery:
// an outbox row any replica's dispatcher claims). A Source holds documents
// to send to partners; only the lease holder lists it (the pickup poller).
//
// The contract every kind keeps:
//
//   - A document appears at a destination whole or not at all: it is
//     written under a temporary name and renamed (folder, SFTP), or put in
//     one request (S3, HTTP). A reader never sees a partial file under the
//     final name.
//   - The final name is chosen by the caller and is deterministic for a
//     document, so a retry after a lost answer writes the same name again
//     (overwriting the same content) instead of adding a second file.
//   - Errors say what failed in words an operator can act on and wrap one
//     of the sentinels below, so the dispatcher can tell a retryable
//     failure (a server down, a timeout) from one that needs a person (a
//     refused login, a host key mismatch, a missing bucket).
package connector

import (
	"context"
	"errors"
	"io"
	"path"
	"strconv"
	"strings"
	"time"
)

// Errors a connector wraps; the dispatcher and the console classify
// failures with errors.Is.
var (
	// ErrUnavailable: the far side could not be reached or answered with
	// a temporary failure (connection refused, timeout, HTTP 5xx, S3
	// 503 SlowDown). Retry later.
	ErrUnavailable = errors.New("connector: unavailable")
	// ErrRefused: the far side refused the credentials, the host key or
	// the write (permission denied, HTTP 4xx, a missing bucket or
	// directory). Retrying will not help until someone fixes it.
	ErrRefused = errors.New("connector: refused")
	// ErrNotFound: the object to read, archive or remove is gone.
	ErrNotFound = errors.New("connector: not found")
)

// Object is one file a Source lists.
type Object struct {
	// Path is the object's name relative to the source's root (folder,
	// SFTP directory, S3 prefix), with forward slashes.
	Path    string
	Size    int64
	ModTime time.Time
	// ETag is the S3 entity tag; empty for the other kinds.
	ETag string
}

// Put describes one document written to a Destination.
type Put struct {
	// Name is the final name, relative to the destination's root, with
	// forward slashes; directories in it are created as needed.
	Name string
	// Body is read once, to its end.
	Body io.Reader
	// Size is Body's length in bytes, or -1 when unknown.
	Size int64
	// ContentType is the document's MIME type (application/edi-x12 …).
	ContentType string
	// Metadata are written where the kind can carry them (S3 object
	// metadata, HTTP headers); keys are lower case, values printable
	// ASCII (Deliver percent-encodes the rest: MetaValue).
	Metadata map[string]string
}

// Destination writes documents. Implementations are safe for concurrent
// use.
type Destination interface {
	// Write stores p.Body under p.Name, whole or not at all, replacing a
	// file of that name.
	Write(ctx context.Context, p Put) error
	// Check verifies the destination can be reached and written to,
	// without leaving a file behind: the console's connectivity test.
	Check(ctx context.Context) error
	Close() error
}

// Source lists and reads documents. Implementations are safe for
// concurrent use.
type Source interface {
	// List returns the files under the source's root (recursively),
	// leaving out the archive directory, temporary names of writers in
	// progress (any path with a segment that starts with a dot: see
	// Hidden) and marker files (see IsMarker). A poller that waits for
	// markers asks for one with HasMarker.
	List(ctx context.Context) ([]Object, error)
	// Open reads one listed file from its start.
	Open(ctx context.Context, o Object) (io.ReadCloser, error)
	// Archive moves a taken file to the archive path to (relative to the
	// root); when to is empty it removes the file. A file already gone
	// (an earlier archive whose answer was lost) is not an error.
	//
	// to is a directory: the file keeps its path below it, at
	// ArchiveName(to, o.Path, 0), or ArchiveName(to, o.Path, n) with the
	// smallest n ≥ 1 that is free when an earlier file of that name was
	// archived already. Only the lease holder archives, so there is no
	// race for the free name.
	Archive(ctx context.Context, o Object, to string) error
	// Check verifies the source can be listed: the console's
	// connectivity test.
	Check(ctx context.Context) error
	Close() error
}

// Document describes one document for routes, file-name templates and
// the metadata sidecar: what edihub knows of a received message (or of a
// file picked up, before it is sent).
type Document struct {
	ID        int64  // messages.id
	MessageID string // the AS2 Message-ID, without angle brackets
	Partner   string // the partner's AS2 name
	Station   string // the station's AS2 name
	Direction string // "inbound" or "outbound"
	// Standard is "x12" or "edifact" when the payload is an interchange
	// edihub read the envelope of; empty otherwise.
	Standard string
	// Type is the document type from the envelope: X12 ST01 ("850"),
	// EDIFACT UNH message type ("ORDERS"); empty when not EDI.
	Type string
	// GroupType is the X12 GS01 functional identifier ("PO"); empty for
	// EDIFACT without groups and for other payloads.
	GroupType string
	// ICN is the interchange control number (ISA13, UNB0020).
	ICN         string
	ContentType string
	// FileName is the original file name from the AS2
	// Content-Disposition, or the picked-up file's base name; empty when
	// there was none.
	FileName string
	MIC      string // the received content's MIC, "base64, alg"
	Size     int64
	Time     time.Time // when the message was received (or picked up)
}

// MarkerSuffix ends the name of a done marker: an empty file NAME.done
// that says NAME (and its sidecar) is complete. Deliver writes one after
// the document when asked to; a source with "stable: marker" takes NAME
// only once NAME.done is there.
const MarkerSuffix = ".done"

// MarkerName returns the done marker's name for the file name.
func MarkerName(name string) string { return name + MarkerSuffix }

// IsMarker reports whether name is a done marker (ends in MarkerSuffix).
func IsMarker(name string) bool { return strings.HasSuffix(name, MarkerSuffix) }

// Hidden reports whether a segment of the slash-separated path p starts
// with a dot: by convention the temporary name of a writer in progress
// (the folder and SFTP connectors write ".NAME.tmp-RANDOM"), which a
// Source's List leaves out.
func Hidden(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if strings.HasPrefix(seg, ".") {
			return true
		}
	}
	return false
}

// HasMarker reports whether the source holds o's done marker, by opening
// it: every kind answers ErrNotFound for a file that is not there.
func HasMarker(ctx context.Context, s Source, o Object) (bool, error) {
	r, err := s.Open(ctx, Object{Path: MarkerName(o.Path)})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, r.Close()
}

// ArchiveName is where Source.Archive moves the file at p (relative to
// the root) for the archive directory to: to/p for n == 0; otherwise
// "~n" is added before the extension (archive/acme/po.edi becomes
// archive/acme/po~1.edi), keeping a file of the same name archived
// earlier.
func ArchiveName(to, p string, n int) string {
	if n == 0 {
		return path.Join(to, p)
	}
	dir, base := path.Split(p)
	ext := path.Ext(base)
	if ext == base {
		ext = "" // ".profile" has no extension
	}
	return path.Join(to, dir, strings.TrimSuffix(base, ext)+"~"+strconv.Itoa(n)+ext)
}
