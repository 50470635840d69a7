package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// SidecarSuffix ends the name of a document's metadata sidecar,
// NAME.json.
const SidecarSuffix = ".json"

// SidecarName returns the sidecar's name for the document name.
func SidecarName(name string) string { return name + SidecarSuffix }

// DeliverOptions configure one Deliver.
type DeliverOptions struct {
	// Template names the document (the zero Template: DefaultTemplate).
	Template Template
	// Sidecar also writes NAME.json (Sidecar) after the document.
	Sidecar bool
	// DoneMarker also writes an empty NAME.done after the document and
	// its sidecar.
	DoneMarker bool
	// SHA256 is the body's lower-case hex SHA-256 when the caller knows
	// it: it goes to the destination (Put.Metadata[MetaSHA256], which
	// spares the HTTP destination a first pass) and into the sidecar.
	SHA256 string
}

// Sidecar is the JSON of a sidecar file: what edihub knows of the
// document next to it. The field names are stable; fields may be added.
// Empty strings are written as "", never left out.
type Sidecar struct {
	Name        string    `json:"name"` // the document's name at the destination
	ID          int64     `json:"id"`   // edihub's message id
	MessageID   string    `json:"message_id"`
	Partner     string    `json:"partner"`
	Station     string    `json:"station"`
	Direction   string    `json:"direction"`
	Standard    string    `json:"standard"`
	Type        string    `json:"type"`
	GroupType   string    `json:"group_type"`
	ICN         string    `json:"icn"`
	ContentType string    `json:"content_type"`
	FileName    string    `json:"file_name"`
	MIC         string    `json:"mic"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	Time        time.Time `json:"time"` // UTC
}

// Deliver writes doc's body to d under the name opts.Template gives it,
// then its sidecar and then its done marker when asked for. The order is
// the promise to a consumer: a marker means the document and its sidecar
// are complete; a sidecar means the document is. Every name is
// deterministic, so a Deliver retried after a failure or a lost answer
// writes the same files again. It returns the document's name, also when
// a write failed (the error is the destination's, wrapping its class).
func Deliver(ctx context.Context, d Destination, doc Document, opts DeliverOptions, body io.Reader) (string, error) {
	name, err := opts.Template.Expand(doc)
	if err != nil {
		return "", err
	}
	return name, WriteDocument(ctx, d, name, doc, opts, body)
}

// WriteDocument is Deliver under a name chosen before (opts.Template is
// not used): the outbox fixes a delivery's name at its first attempt, so
// that a retry writes the same files even if the template changed since.
func WriteDocument(ctx context.Context, d Destination, name string, doc Document, opts DeliverOptions, body io.Reader) error {
	size := int64(-1)
	if doc.Size > 0 {
		size = doc.Size
	}
	meta := Metadata(doc)
	if opts.SHA256 != "" {
		meta[MetaSHA256] = opts.SHA256
	}
	err := d.Write(ctx, Put{Name: name, Body: body, Size: size, ContentType: doc.ContentType, Metadata: meta})
	if err != nil {
		return fmt.Errorf("deliver %s: %w", name, err)
	}
	if opts.Sidecar {
		b, err := json.Marshal(SidecarOf(doc, name, opts.SHA256))
		if err != nil {
			return fmt.Errorf("deliver %s: sidecar: %w", name, err)
		}
		b = append(b, '\n')
		err = d.Write(ctx, Put{Name: SidecarName(name), Body: bytes.NewReader(b), Size: int64(len(b)), ContentType: "application/json"})
		if err != nil {
			return fmt.Errorf("deliver %s: sidecar: %w", name, err)
		}
	}
	if opts.DoneMarker {
		err := d.Write(ctx, Put{Name: MarkerName(name), Body: bytes.NewReader(nil), Size: 0, ContentType: "text/plain"})
		if err != nil {
			return fmt.Errorf("deliver %s: done marker: %w", name, err)
		}
	}
	return nil
}

// SidecarOf returns the sidecar of doc delivered as name.
func SidecarOf(doc Document, name, sha256 string) Sidecar {
	return Sidecar{
		Name: name, ID: doc.ID, MessageID: doc.MessageID, Partner: doc.Partner, Station: doc.Station,
		Direction: doc.Direction, Standard: doc.Standard, Type: doc.Type, GroupType: doc.GroupType,
		ICN: doc.ICN, ContentType: doc.ContentType, FileName: doc.FileName, MIC: doc.MIC,
		Size: doc.Size, SHA256: sha256, Time: doc.Time.UTC(),
	}
}

// Metadata returns what a destination that carries metadata (S3 object
// metadata, HTTP headers) gets of doc: the keys id, message-id, partner,
// station, direction, standard, type, group-type, icn, file-name and mic,
// those that have a value, each value made printable ASCII by MetaValue.
func Metadata(doc Document) map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{
		"id": idString(doc.ID), "message-id": doc.MessageID, "partner": doc.Partner, "station": doc.Station,
		"direction": doc.Direction, "standard": doc.Standard, "type": doc.Type, "group-type": doc.GroupType,
		"icn": doc.ICN, "file-name": doc.FileName, "mic": doc.MIC,
	} {
		if v != "" {
			m[k] = MetaValue(v)
		}
	}
	return m
}

// MetaValue percent-encodes (RFC 3986, upper-case hex) every byte of v
// that is not printable ASCII, and "%" itself, so that decoding gives v
// back: the form HTTP headers and S3 metadata carry.
func MetaValue(v string) string {
	if !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '%' }) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
