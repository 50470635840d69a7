package outbox

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/edihub/edihub/internal/connector"
)

// DeliveryNameFunc names the file or object a document is written under
// at a destination, relative to the destination's root with forward
// slashes. It must be deterministic: the first attempt's name is kept for
// every retry, but a name computed again for the same document must not
// differ.
type DeliveryNameFunc func(destination string, doc connector.Document) (string, error)

// DefaultDeliveryName is the name used until the connectors' file-name
// templates name deliveries:
// "{partner}/{yyyy}/{mm}/{dd}/{icn}-{message_id}.{ext}" with the date the
// document was received (UTC), "{message_id}.{ext}" alone when the
// document carries no interchange control number. Each element is reduced
// to letters, digits, '.', '-' and '_' (others become '_'), so no element
// is empty, "." or "..", and none escapes the destination's root.
func DefaultDeliveryName(_ string, doc connector.Document) (string, error) {
	if doc.MessageID == "" {
		return "", errors.New("the document has no Message-ID")
	}
	t := doc.Time.UTC()
	base := safeElement(doc.MessageID)
	if doc.ICN != "" {
		base = safeElement(doc.ICN) + "-" + base
	}
	return path.Join(safeElement(doc.Partner), fmt.Sprintf("%04d", t.Year()), fmt.Sprintf("%02d", t.Month()),
		fmt.Sprintf("%02d", t.Day()), base+"."+extension(doc)), nil
}

// safeElement is s as one path element: letters, digits, '.', '-' and '_'
// kept, every other byte '_', at most 100 bytes, never "", "." or "..".
func safeElement(s string) string {
	b := []byte(s)
	if len(b) > 100 {
		b = b[:100]
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
		if !ok {
			b[i] = '_'
		}
	}
	if e := strings.Trim(string(b), "."); e == "" {
		return "_" + string(b)
	}
	return string(b)
}

// extension is the file extension of doc: by its envelope's standard,
// else by its content type.
func extension(doc connector.Document) string {
	ct := strings.ToLower(doc.ContentType)
	switch {
	case doc.Standard == "x12" || strings.Contains(ct, "x12"):
		return "x12"
	case doc.Standard == "edifact" || strings.Contains(ct, "edifact"):
		return "edi"
	case strings.Contains(ct, "xml"):
		return "xml"
	case strings.Contains(ct, "json"):
		return "json"
	case strings.HasPrefix(ct, "text/"):
		return "txt"
	}
	return "bin"
}
