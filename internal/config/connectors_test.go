package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/connector"
)

// testHostKey is an SFTP server's public host key (ssh-keygen -t ed25519).
const testHostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHlKgH8UGeZmdyGvVrNmphgjrIlDJVtlWilKe/ImQVFl"

// fullConnectors is a document with every kind of connector and route.
const fullConnectors = `
destinations:
  - name: erp-inbox
    type: folder
    folder: {path: erp/inbox}
    sidecar: true
    done_marker: true
  - name: erp-sftp
    type: sftp
    sftp: {host: sftp.example.com, user: edi, key_secret: sftp-key, host_key: "` + testHostKey + `", path: /inbound}
  - name: lake
    type: s3
    s3: {endpoint: "https://s3.example.com", bucket: edi, prefix: inbound/, region: us-east-1, access_key_secret: s3-id, secret_key_secret: s3-key, path_style: true}
    file_name: "{partner}/{message_id}.{ext}"
  - name: app
    type: http
    http: {url: "https://app.example.com/edi", secret: app-hook}
sources:
  - name: erp-outbox
    type: folder
    folder: {path: erp/outbox}
  - name: bucket-out
    type: s3
    s3: {bucket: edi-out}
    stable: etag
    after: delete
    poll: 1m
routes:
  - name: orders-to-erp
    match: {direction: inbound, partners: [acme], types: ["850", "ORDERS"]}
    to: [erp-inbox, lake]
  - name: everything-else
    to: [app]
  - name: acme-out
    match: {source: erp-outbox, path: "acme/*"}
    partner: acme
    ordered: true
  - name: by-receiver
    match: {source: erp-outbox}
`

// connectorsDirs makes a secrets directory holding the secrets
// fullConnectors names, and a folders directory.
func connectorsDirs(t *testing.T) (secrets, folders string) {
	t.Helper()
	secrets, folders = t.TempDir(), t.TempDir()
	for _, name := range []string{"sftp-key", "s3-id", "s3-key", "app-hook", "sftp-pass"} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return secrets, folders
}

func TestParseConnectorsFull(t *testing.T) {
	secrets, folders := connectorsDirs(t)
	c, err := ParseConnectors([]byte(fullConnectors), ConnectorsOptions{Name: "c.yaml", SecretsDir: secrets, FoldersDir: folders})
	if err != nil {
		t.Fatalf("ParseConnectors = %v, want nil", err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("Warnings = %q, want none", c.Warnings)
	}
	// Defaults filled in.
	d, _ := c.Destination("erp-inbox")
	if d.FileName != DefaultFileName || !d.Sidecar || !d.DoneMarker {
		t.Errorf("erp-inbox = %+v, want the default file name, sidecar and done marker", d)
	}
	if d, _ := c.Destination("erp-sftp"); d.SFTP.Port != 22 {
		t.Errorf("erp-sftp port = %d, want 22 (default)", d.SFTP.Port)
	}
	s, _ := c.Source("erp-outbox")
	want := PickupSource{Name: "erp-outbox", Type: KindFolder, Folder: &FolderSpec{Path: "erp/outbox"}, Stable: StablePolls, After: AfterArchive, Archive: DefaultArchive, Poll: Duration(DefaultPoll)}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("erp-outbox (-want +got):\n%s", diff)
	}
	if s, _ := c.Source("bucket-out"); s.Archive != "" || time.Duration(s.Poll) != time.Minute {
		t.Errorf("bucket-out = %+v, want no archive and poll 1m", s)
	}
	if r := c.Routes[1]; r.Criteria.Direction != DirectionInbound {
		t.Errorf("route without direction or source: direction %q, want inbound", r.Criteria.Direction)
	}
	if r := c.Routes[2]; r.Criteria.Direction != DirectionOutbound {
		t.Errorf("route with a source: direction %q, want outbound", r.Criteria.Direction)
	}
	// The encoded document parses back to the same.
	text, err := EncodeConnectors(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseConnectors([]byte(text), ConnectorsOptions{SecretsDir: secrets, FoldersDir: folders})
	if err != nil {
		t.Fatalf("ParseConnectors(EncodeConnectors(c)) = %v\n%s", err, text)
	}
	if diff := cmp.Diff(c, again); diff != "" {
		t.Errorf("encoded and parsed again (-first +again):\n%s", diff)
	}
}

func TestParseConnectorsEmpty(t *testing.T) {
	for _, give := range []string{"", "\n", "destinations: []\n"} {
		c, err := ParseConnectors([]byte(give), ConnectorsOptions{})
		if err != nil || len(c.Destinations)+len(c.Sources)+len(c.Routes) != 0 {
			t.Errorf("ParseConnectors(%q) = %+v, %v, want an empty document", give, c, err)
		}
	}
}

func TestParseConnectorsErrors(t *testing.T) {
	sftp := func(extra string) string {
		return "destinations:\n  - name: a\n    type: folder\n    folder: {path: x}\n  - name: erp-sftp\n    type: sftp\n    sftp: {host: h.example, user: u" + extra + "}\n"
	}
	folderDest := "destinations:\n  - name: d\n    type: folder\n    folder: {path: x}\n"
	folderSrc := "sources:\n  - name: s\n    type: folder\n    folder: {path: y}\n"
	tests := []struct {
		name string
		give string
		// want are substrings of the error; line is its line.
		want []string
		line int
	}{
		{"unknown top key", "destination: []\n", []string{"unknown key \"destination\"", "destinations, sources, routes"}, 1},
		{"unknown destination key", "destinations:\n  - name: d\n    type: folder\n    folder: {path: x}\n    sidcar: true\n", []string{"destinations[0].sidcar", "file_name, sidecar, done_marker"}, 5},
		{"unknown sftp key", sftp(", hostkey: x"), []string{"destinations[1].sftp.hostkey", "host_key"}, 7},
		{"bad name", "destinations:\n  - name: ERP\n    type: folder\n    folder: {path: x}\n", []string{"destinations[0].name", `destination name "ERP"`}, 2},
		{"no name", "destinations:\n  - type: folder\n    folder: {path: x}\n", []string{"destinations[0].name", "without a name"}, 2},
		{"duplicate name across kinds", folderDest + "sources:\n  - name: d\n    type: folder\n    folder: {path: y}\n", []string{"sources[0].name", `source "d": the name of destinations[0] too`}, 6},
		{"unknown type", "destinations:\n  - name: d\n    type: ftp\n", []string{"destinations[0].type", `type "ftp" is not one of folder, http, s3, sftp`}, 3},
		{"block missing", "destinations:\n  - name: d\n    type: s3\n", []string{"destinations[0].s3", "the s3 block is missing"}, 2},
		{"other block", "destinations:\n  - name: d\n    type: folder\n    folder: {path: x}\n    s3: {bucket: abc}\n", []string{"destinations[0].s3", "a s3 block in a folder destination"}, 5},
		{"http source", "sources:\n  - name: s\n    type: http\n    http: {url: https://x.example}\n", []string{"sources[0].http", `unknown key "http"`, "folder, sftp, s3"}, 4},
		{"folder absolute", "destinations:\n  - name: d\n    type: folder\n    folder: {path: /etc}\n", []string{"destinations[0].folder.path", `"/etc" is absolute`, "EDIHUB_FOLDERS_DIR"}, 4},
		{"folder dotdot", "destinations:\n  - name: d\n    type: folder\n    folder: {path: a/../../b}\n", []string{"destinations[0].folder.path", "leads out of its root"}, 4},
		{"sftp host_key missing", sftp(", key_secret: sftp-key"), []string{`destinations[1].sftp.host_key: destination "erp-sftp": host_key: required`, "ssh-keyscan -t ed25519 HOST"}, 7},
		{"sftp host_key bad", sftp(`, key_secret: sftp-key, host_key: "ssh-ed25519 nope"`), []string{"destinations[1].sftp.host_key", "not a public key line"}, 7},
		{"sftp no credential", sftp(`, host_key: "` + testHostKey + `"`), []string{"destinations[1].sftp", "neither password_secret nor key_secret"}, 7},
		{"sftp both credentials", sftp(`, key_secret: sftp-key, password_secret: sftp-pass, host_key: "` + testHostKey + `"`), []string{"destinations[1].sftp.password_secret", "both"}, 7},
		{"sftp host url", "destinations:\n  - name: s\n    type: sftp\n    sftp: {host: \"sftp://h\", user: u}\n", []string{"destinations[0].sftp.host", "not a host name"}, 4},
		{"sftp port", sftp(", port: 70000"), []string{"destinations[1].sftp.port", "port 70000"}, 7},
		{"secret path", sftp(`, key_secret: ../etc/shadow, host_key: "` + testHostKey + `"`), []string{"destinations[1].sftp.key_secret", `secret reference "../etc/shadow": not a name`}, 7},
		{"secret missing", sftp(`, key_secret: nope, host_key: "` + testHostKey + `"`), []string{"destinations[1].sftp.key_secret", `"nope": not found in the secrets directory`, "EDIHUB_SECRETS_DIR"}, 7},
		{"s3 bucket", "destinations:\n  - name: b\n    type: s3\n    s3: {bucket: My_Bucket}\n", []string{"destinations[0].s3.bucket", "not a valid bucket name"}, 4},
		{"s3 bucket ip", "destinations:\n  - name: b\n    type: s3\n    s3: {bucket: 10.0.0.1}\n", []string{"destinations[0].s3.bucket"}, 4},
		{"s3 endpoint", "destinations:\n  - name: b\n    type: s3\n    s3: {bucket: abc, endpoint: s3.example.com}\n", []string{"destinations[0].s3.endpoint", "not an absolute http(s) URL"}, 4},
		{"s3 one key", "destinations:\n  - name: b\n    type: s3\n    s3: {bucket: abc, access_key_secret: s3-id}\n", []string{"destinations[0].s3.access_key_secret", "both"}, 4},
		{"http url credentials", "destinations:\n  - name: h\n    type: http\n    http: {url: \"https://u:p@x.example/\", secret: app-hook}\n", []string{"destinations[0].http.url", "user or password"}, 4},
		{"http ftp url", "destinations:\n  - name: h\n    type: http\n    http: {url: \"ftp://x.example/\", secret: app-hook}\n", []string{"destinations[0].http.url", "not an absolute http(s) URL"}, 4},
		{"http no secret", "destinations:\n  - name: h\n    type: http\n    http: {url: \"https://x.example/\"}\n", []string{"destinations[0].http.secret", "required"}, 4},
		{"http sidecar", "destinations:\n  - name: h\n    type: http\n    http: {url: \"https://x.example/\", secret: app-hook}\n    sidecar: true\n", []string{"destinations[0].sidecar"}, 5},
		{"template brace", folderDest + "    file_name: \"{partner/x\"\n", []string{"destinations[0].file_name", "a { without its }"}, 5},
		{"template absolute", folderDest + "    file_name: \"/{partner}\"\n", []string{"destinations[0].file_name", "starts with /"}, 5},
		{"template dotdot", folderDest + "    file_name: \"../{partner}\"\n", []string{"destinations[0].file_name", "has an empty, . or .. segment"}, 5},
		{"template unknown placeholder", folderDest + "    file_name: \"{partner}/{nope}-{id}\"\n", []string{"destinations[0].file_name", "{nope}"}, 5},
		{"stable etag folder", folderSrc + "    stable: etag\n", []string{"sources[0].stable", "needs an s3 source"}, 5},
		{"after", folderSrc + "    after: move\n", []string{"sources[0].after", `after "move"`}, 5},
		{"archive with delete", folderSrc + "    after: delete\n    archive: old/\n", []string{"sources[0].archive"}, 6},
		{"archive out", folderSrc + "    archive: ../old\n", []string{"sources[0].archive", "leads out"}, 5},
		{"poll short", folderSrc + "    poll: 10ms\n", []string{"sources[0].poll", "shorter than 1s"}, 5},
		{"poll not a duration", folderSrc + "    poll: often\n", []string{"sources[0].poll", "where a duration is expected", "like 10s"}, 5},
		{"route to unknown", folderDest + "routes:\n  - name: r\n    to: [nope]\n", []string{"routes[0].to[0]", `route "r": no destination is named "nope"`}, 7},
		{"route to twice", folderDest + "routes:\n  - name: r\n    to: [d, d]\n", []string{"routes[0].to[1]", "listed twice"}, 7},
		{"route no to", folderDest + "routes:\n  - name: r\n    match: {partners: [acme]}\n", []string{"routes[0].to", "names no destination"}, 6},
		{"route duplicate", folderDest + "routes:\n  - name: r\n    to: [d]\n  - name: r\n    to: [d]\n", []string{"routes[1].name", "the name of routes[0] too"}, 8},
		{"outbound unknown source", folderSrc + "routes:\n  - name: r\n    match: {source: nope}\n", []string{"routes[0].match.source", `no source is named "nope"`}, 7},
		{"outbound with to", folderDest + folderSrc + "routes:\n  - name: r\n    match: {source: s}\n    to: [d]\n", []string{"routes[0].to", "go to a partner"}, 12},
		{"outbound without source", folderSrc + "routes:\n  - name: r\n    match: {direction: outbound}\n", []string{"routes[0].match.source", "names no source"}, 7},
		{"outbound matches types", folderSrc + "routes:\n  - name: r\n    match: {source: s, types: [\"850\"]}\n", []string{"routes[0].match", "a source and a path only"}, 7},
		{"outbound bad glob", folderSrc + "routes:\n  - name: r\n    match: {source: s, path: \"a/[\"}\n", []string{"routes[0].match.path", "not a valid pattern"}, 7},
		{"inbound with source", folderDest + "routes:\n  - name: r\n    match: {direction: inbound, source: s}\n    to: [d]\n", []string{"routes[0].match.source", "an inbound route matches no source"}, 7},
		{"inbound partner", folderDest + "routes:\n  - name: r\n    partner: acme\n    to: [d]\n", []string{"routes[0].partner"}, 7},
		{"direction", folderDest + "routes:\n  - name: r\n    match: {direction: sideways}\n    to: [d]\n", []string{"routes[0].match.direction", `direction "sideways"`}, 7},
		{"content type", folderDest + "routes:\n  - name: r\n    match: {content_types: [\"not a type\"]}\n    to: [d]\n", []string{"routes[0].match.content_types[0]", "not a media type"}, 7},
		{"empty match value", folderDest + "routes:\n  - name: r\n    match: {partners: [\"\"]}\n    to: [d]\n", []string{"routes[0].match.partners[0]", "an empty value"}, 7},
		{"two documents", "destinations: []\n---\nroutes: []\n", []string{"more than one YAML document"}, 0},
		{"not a mapping", "- a\n", []string{"wrong type", "destinations, sources, routes"}, 1},
		{"syntax", "destinations: [\n", []string{"invalid YAML"}, 0},
	}
	secrets, folders := connectorsDirs(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConnectors([]byte(tt.give), ConnectorsOptions{Name: "c.yaml", SecretsDir: secrets, FoldersDir: folders})
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("ParseConnectors(%q) = %v, want an *Error", tt.give, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseConnectors(%q) = %q, want it to contain %q", tt.give, err, w)
				}
			}
			if ce.Fix == "" {
				t.Errorf("ParseConnectors(%q) = %q, want a fix", tt.give, err)
			}
			if tt.line != 0 && ce.Line != tt.line {
				t.Errorf("ParseConnectors(%q) line = %d, want %d (%v)", tt.give, ce.Line, tt.line, err)
			}
		})
	}
}

// TestParseConnectorsDirs: without a secrets or folders directory the
// document is refused on a replica, naming the setting, and checked with
// warnings away from the replicas; a secret missing is the same.
func TestParseConnectorsDirs(t *testing.T) {
	secrets, folders := connectorsDirs(t)
	empty := t.TempDir()
	tests := []struct {
		name      string
		give      ConnectorsOptions
		wantErr   string
		wantWarns int
	}{
		{"all there", ConnectorsOptions{SecretsDir: secrets, FoldersDir: folders}, "", 0},
		{"no folders dir", ConnectorsOptions{SecretsDir: secrets}, "EDIHUB_FOLDERS_DIR (-folders-dir)", 0},
		{"no secrets dir", ConnectorsOptions{FoldersDir: folders}, "no secrets directory is configured", 0},
		{"secrets missing", ConnectorsOptions{SecretsDir: empty, FoldersDir: folders}, `secret reference "sftp-key": not found`, 0},
		// erp-inbox and erp-outbox; sftp-key, s3-id, s3-key, app-hook.
		{"away, nothing here", ConnectorsOptions{Away: true}, "", 2 + 4},
		{"away, secrets missing", ConnectorsOptions{Away: true, SecretsDir: empty, FoldersDir: folders}, "", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConnectors([]byte(fullConnectors), tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseConnectors = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConnectors = %v, want nil", err)
			}
			if len(c.Warnings) != tt.wantWarns {
				t.Errorf("Warnings = %q, want %d", c.Warnings, tt.wantWarns)
			}
		})
	}
}

// TestParseConnectorsSecretOutsideRoot: a secret name that is a link out
// of the secrets directory is not found, as the os.Root refuses it.
func TestParseConnectorsSecretOutsideRoot(t *testing.T) {
	secrets, folders := connectorsDirs(t)
	outside := filepath.Join(t.TempDir(), "real")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(secrets, "app-hook")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(secrets, "app-hook")); err != nil {
		t.Fatal(err)
	}
	_, err := ParseConnectors([]byte(fullConnectors), ConnectorsOptions{SecretsDir: secrets, FoldersDir: folders})
	if err == nil || !strings.Contains(err.Error(), `"app-hook": not found`) {
		t.Fatalf("ParseConnectors with a secret linking out = %v, want not found", err)
	}
}

func TestParseConnectorsTooLarge(t *testing.T) {
	give := "destinations: []\n" + strings.Repeat("#", MaxConnectorsBytes)
	_, err := ParseConnectors([]byte(give), ConnectorsOptions{})
	if err == nil || !strings.Contains(err.Error(), "larger than 1024 KiB") {
		t.Fatalf("ParseConnectors(%d bytes) = %v, want refused as too large", len(give), err)
	}
}

func TestRouteMatch(t *testing.T) {
	secrets, folders := connectorsDirs(t)
	c, err := ParseConnectors([]byte(fullConnectors), ConnectorsOptions{SecretsDir: secrets, FoldersDir: folders})
	if err != nil {
		t.Fatal(err)
	}
	in := func(partner, typ, group string) connector.Document {
		return connector.Document{Direction: DirectionInbound, Partner: partner, Type: typ, GroupType: group}
	}
	tests := []struct {
		give      connector.Document
		wantRoute string
		wantTo    []string
	}{
		{in("acme", "850", "PO"), "orders-to-erp", []string{"erp-inbox", "lake"}},
		{in("acme", "ORDERS", ""), "orders-to-erp", []string{"erp-inbox", "lake"}},
		{in("acme", "orders", ""), "orders-to-erp", []string{"erp-inbox", "lake"}},
		{in("acme", "", "850"), "orders-to-erp", []string{"erp-inbox", "lake"}},
		{in("ACME", "850", ""), "everything-else", []string{"app"}},
		{in("acme", "810", "IN"), "everything-else", []string{"app"}},
		{in("other", "", ""), "everything-else", []string{"app"}},
		{connector.Document{Direction: DirectionOutbound, Partner: "acme", Type: "850"}, "", nil},
	}
	for _, tt := range tests {
		route, to := c.DestinationsFor(tt.give)
		if route != tt.wantRoute || !cmp.Equal(to, tt.wantTo) {
			t.Errorf("DestinationsFor(%+v) = %q, %q, want %q, %q", tt.give, route, to, tt.wantRoute, tt.wantTo)
		}
	}
}

func TestRouteMatchStationsAndContentTypes(t *testing.T) {
	r := Route{Name: "r", Criteria: RouteMatch{Direction: DirectionInbound, Stations: []string{"HUB"}, ContentTypes: []string{"application/EDI-X12"}}, To: []string{"d"}}
	tests := []struct {
		give connector.Document
		want bool
	}{
		{connector.Document{Direction: "inbound", Station: "HUB", ContentType: "application/edi-x12; charset=us-ascii"}, true},
		{connector.Document{Direction: "inbound", Station: "HUB", ContentType: "application/edifact"}, false},
		{connector.Document{Direction: "inbound", Station: "OTHER", ContentType: "application/edi-x12"}, false},
		{connector.Document{Direction: "inbound", Station: "HUB", ContentType: ""}, false},
	}
	for _, tt := range tests {
		if got := r.Match(tt.give); got != tt.want {
			t.Errorf("Match(%+v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestSourceRoute(t *testing.T) {
	secrets, folders := connectorsDirs(t)
	c, err := ParseConnectors([]byte(fullConnectors), ConnectorsOptions{SecretsDir: secrets, FoldersDir: folders})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		source, path string
		want         string
	}{
		{"erp-outbox", "acme/po1.edi", "acme-out"},
		{"erp-outbox", "acme/sub/po1.edi", "by-receiver"},
		{"erp-outbox", "other/po1.edi", "by-receiver"},
		{"bucket-out", "acme/po1.edi", ""},
		{"nope", "x", ""},
	}
	for _, tt := range tests {
		r, ok := c.SourceRoute(tt.source, tt.path)
		if r.Name != tt.want || ok != (tt.want != "") {
			t.Errorf("SourceRoute(%q, %q) = %q, %v, want %q", tt.source, tt.path, r.Name, ok, tt.want)
		}
	}
}

// FuzzParseConnectors: no input crashes the parser or makes it return
// neither a document nor an *Error, and a document it accepts encodes to
// one it accepts again.
func FuzzParseConnectors(f *testing.F) {
	f.Add([]byte(fullConnectors))
	f.Add([]byte("destinations:\n  - name: d\n    type: folder\n    folder: {path: x}\nroutes:\n  - name: r\n    to: [d]\n"))
	f.Add([]byte("sources: [{name: s, type: folder, folder: {path: y}, poll: 5s}]\nroutes: [{name: r, match: {source: s, path: 'a/*'}}]"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		o := ConnectorsOptions{Away: true}
		c, err := ParseConnectors(data, o)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("ParseConnectors = %T %v, want an *Error", err, err)
			}
			return
		}
		text, err := EncodeConnectors(c)
		if err != nil {
			t.Fatalf("EncodeConnectors = %v", err)
		}
		if _, err := ParseConnectors([]byte(text), o); err != nil {
			t.Fatalf("ParseConnectors(EncodeConnectors(c)) = %v\n%s", err, text)
		}
	})
}
