package config

import (
	"bytes"
	"fmt"
	"mime"
	"path"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/edihub/edihub/internal/connector"
)

// Destination returns the destination called name.
func (c *Connectors) Destination(name string) (Destination, bool) {
	for _, d := range c.Destinations {
		if d.Name == name {
			return d, true
		}
	}
	return Destination{}, false
}

// Source returns the source called name.
func (c *Connectors) Source(name string) (PickupSource, bool) {
	for _, s := range c.Sources {
		if s.Name == name {
			return s, true
		}
	}
	return PickupSource{}, false
}

// Match reports whether the inbound route r takes doc: doc's direction
// is the route's, and each list the route sets holds doc's value
// (partners and stations exactly, as AS2 names are; types against the
// document type or the X12 functional group, either case; content types
// by media type, parameters and case aside). An outbound route matches
// no document: see Connectors.SourceRoute.
func (r Route) Match(doc connector.Document) bool {
	m := r.Criteria
	if m.Direction != DirectionInbound || doc.Direction != DirectionInbound {
		return false
	}
	if len(m.Partners) > 0 && !slices.Contains(m.Partners, doc.Partner) {
		return false
	}
	if len(m.Stations) > 0 && !slices.Contains(m.Stations, doc.Station) {
		return false
	}
	if len(m.Types) > 0 && !slices.ContainsFunc(m.Types, func(t string) bool {
		return (doc.Type != "" && strings.EqualFold(t, doc.Type)) || (doc.GroupType != "" && strings.EqualFold(t, doc.GroupType))
	}) {
		return false
	}
	if len(m.ContentTypes) > 0 {
		got := mediaType(doc.ContentType)
		if got == "" || !slices.ContainsFunc(m.ContentTypes, func(t string) bool { return mediaType(t) == got }) {
			return false
		}
	}
	return true
}

// mediaType is the lower-case media type of a Content-Type value,
// without parameters; "" when it does not parse.
func mediaType(v string) string {
	t, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return t
}

// DestinationsFor returns the first inbound route that matches doc and the
// destinations it names, in the route's order; "" and nil when no route
// matches (the document stays in the API and the feed only).
func (c *Connectors) DestinationsFor(doc connector.Document) (route string, to []string) {
	for _, r := range c.Routes {
		if r.Match(doc) {
			return r.Name, slices.Clone(r.To)
		}
	}
	return "", nil
}

// SourceRoute returns the first outbound route for a file at filePath
// (relative to the source's root, forward slashes) of source: its
// Criteria.Source is source and its Criteria.Path, if any, matches filePath
// (path.Match: * stays within one directory).
func (c *Connectors) SourceRoute(source, filePath string) (Route, bool) {
	for _, r := range c.Routes {
		m := r.Criteria
		if m.Direction != DirectionOutbound || m.Source != source {
			continue
		}
		if m.Path != "" {
			if ok, err := path.Match(m.Path, filePath); err != nil || !ok {
				continue
			}
		}
		return r, true
	}
	return Route{}, false
}

// EncodeConnectors writes c as a connectors document, defaults filled
// in: what edihub connectors get prints and apply takes back.
func EncodeConnectors(c *Connectors) (string, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return "", fmt.Errorf("encode connectors: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("encode connectors: %w", err)
	}
	if b.String() == "{}\n" {
		return "", nil
	}
	return b.String(), nil
}
