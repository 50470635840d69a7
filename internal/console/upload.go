package console

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"

	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/spool"
)

// The send form's document is read from the multipart body as it
// arrives, never held whole past the spool threshold: the way POST
// /api/v1/messages reads a document, and stored the same way (outbox.Queue
// copies a spooled one into payload_chunks in the enqueue transaction).

// maxFormField bounds a form field of the send form other than the
// document (partner, content type, key).
const maxFormField = 4 << 10

// formEnvelope is what the multipart envelope and the other fields may
// add to the document in the body.
const formEnvelope = 64 << 10

var (
	// errNoDocument means the form holds no file to send.
	errNoDocument = errors.New("no document in the form")
	// errTooLarge means the document is over Options.MaxUploadBytes.
	errTooLarge = errors.New("document over the upload limit")
	// errSpool means the spool file could not be made or written (not
	// for want of room: spool.ErrFull): this replica's fault, not the
	// upload's.
	errSpool = errors.New("spool the document")
)

// upload is a send form read from its body: its fields, and its document
// in memory (up to the spool threshold) or in a spool file, which close
// removes.
type upload struct {
	fields   map[string]string
	filename string
	fileType string // the Content-Type the browser gave the file
	doc      outbox.Document
	file     *spool.File
}

// size is the document's size in bytes.
func (u *upload) size() int64 {
	if u.doc.Open != nil {
		return u.doc.Size
	}
	return int64(len(u.doc.Payload))
}

func (u *upload) close() {
	if u.file != nil {
		_ = u.file.Close()
	}
}

// readUpload reads the send form from r's body, bounded by the caller.
// Errors: errNoDocument, errTooLarge, spool.ErrFull (no room for the
// document on this replica), errSpool, an *http.MaxBytesError, or a
// broken body.
func (c *Console) readUpload(r *http.Request) (*upload, error) {
	u := &upload{fields: map[string]string{}}
	if r.ContentLength > c.o.MaxUploadBytes+formEnvelope {
		return u, errTooLarge // decided from the header: the body stays unread
	}
	if c.o.Spool != nil && r.ContentLength > c.spoolFrom() && !c.o.Spool.Fits(r.ContentLength) {
		return u, spool.ErrFull // decided from the header: the body stays unread
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return u, err
	}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return u, err
		}
		if err := c.readPart(u, p); err != nil {
			return u, err
		}
	}
	if u.filename == "" {
		return u, errNoDocument
	}
	return u, nil
}

// readPart reads one part of the send form: the document, or a field
// (the first of each name counts).
func (c *Console) readPart(u *upload, p *multipart.Part) error {
	name := p.FormName() // NextPart discards what is left of it
	if name == "document" {
		if p.FileName() == "" || u.filename != "" {
			return nil // no file chosen, or a second one
		}
		u.filename, u.fileType = p.FileName(), p.Header.Get("Content-Type")
		return c.readDocument(u, p)
	}
	v, err := io.ReadAll(io.LimitReader(p, maxFormField+1))
	if err != nil {
		return err
	}
	if len(v) > maxFormField {
		return fmt.Errorf("form field %q over %d bytes", name, maxFormField)
	}
	if _, seen := u.fields[name]; !seen {
		u.fields[name] = string(v)
	}
	return nil
}

// readDocument reads the document: into memory up to the spool
// threshold (or whole without a spool), else on into a spool file.
func (c *Console) readDocument(u *upload, src io.Reader) error {
	limit, from := c.o.MaxUploadBytes, c.spoolFrom()
	if c.o.Spool == nil {
		from = limit
	}
	head, err := io.ReadAll(io.LimitReader(src, from+1))
	if err != nil {
		return err
	}
	if int64(len(head)) > limit {
		return errTooLarge
	}
	if int64(len(head)) <= from {
		u.doc = outbox.Document{Payload: head}
		return nil
	}
	if u.file, err = c.o.Spool.Create(); err != nil {
		return fmt.Errorf("%w: %w", errSpool, err)
	}
	dst := spoolWriter{u.file}
	if _, err := dst.Write(head); err != nil {
		return err
	}
	n, err := io.CopyBuffer(dst, io.LimitReader(src, limit+1-int64(len(head))), make([]byte, 256<<10))
	if err != nil {
		return err
	}
	if int64(len(head))+n > limit {
		return errTooLarge
	}
	u.doc = outbox.Document{Open: u.file.Reader, Size: u.file.Size()}
	return nil
}

// spoolWriter writes to a spool file, its errors but spool.ErrFull
// marked errSpool.
type spoolWriter struct{ f *spool.File }

func (w spoolWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil && !errors.Is(err, spool.ErrFull) {
		err = fmt.Errorf("%w: %w", errSpool, err)
	}
	return n, err
}

// spoolFrom is the size above which a document goes to the spool.
func (c *Console) spoolFrom() int64 {
	if c.o.SpoolFromBytes > 0 {
		return c.o.SpoolFromBytes
	}
	return outbox.DefaultSpoolFromBytes
}
