package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/api"
)

// docURL names the OpenAPI document for the schema compiler; its
// schemas' $refs ("#/components/schemas/X") resolve within it.
const docURL = "urn:edihub:api:openapi.json"

// apiPrefix is where the router mounts the API: the document's server URL.
const apiPrefix = "/api/v1"

// methods are the operations a path item of OpenAPI 3.1 may hold.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// openAPIDoc is the API's OpenAPI document, with the JSON schema of every
// answer compiled.
type openAPIDoc struct {
	raw  map[string]any
	tmpl []pathTemplate
	// schemas are the compiled schemas of the JSON answers, by the JSON
	// pointer of their schema object.
	schemas map[string]*jsonschema.Schema
}

// pathTemplate is one path of the document, split in segments.
type pathTemplate struct {
	path     string
	segments []string
	literals int // segments that are not {parameters}
}

// loadDoc parses and compiles the document once per test binary.
var loadDoc = sync.OnceValues(func() (*openAPIDoc, error) {
	b, err := api.OpenAPI()
	if err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode the document: %w", err)
	}
	raw, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("the document is not a JSON object")
	}
	d := &openAPIDoc{raw: raw, schemas: map[string]*jsonschema.Schema{}}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, v); err != nil {
		return nil, fmt.Errorf("add the document: %w", err)
	}
	paths, _ := raw["paths"].(map[string]any)
	for p := range paths {
		t := pathTemplate{path: p, segments: strings.Split(strings.TrimPrefix(p, "/"), "/")}
		for _, s := range t.segments {
			if !isParam(s) {
				t.literals++
			}
		}
		d.tmpl = append(d.tmpl, t)
	}
	// Every JSON answer's schema compiles (and validates against the
	// JSON Schema 2020-12 meta-schema).
	err = d.eachResponse(func(ptr string, resp map[string]any) error {
		content, _ := resp["content"].(map[string]any)
		for mt := range content {
			if !isJSON(mt) {
				continue
			}
			sptr := ptr + "/content/" + escape(mt) + "/schema"
			if _, err := d.resolve(sptr); err != nil {
				return fmt.Errorf("%s: %w", ptr, err)
			}
			sch, err := c.Compile(docURL + "#" + sptr)
			if err != nil {
				return fmt.Errorf("compile %s: %w", sptr, err)
			}
			d.schemas[sptr] = sch
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for name := range d.mapAt("/components/schemas") {
		if _, err := c.Compile(docURL + "#/components/schemas/" + escape(name)); err != nil {
			return nil, fmt.Errorf("compile schema %s: %w", name, err)
		}
	}
	return d, nil
})

func isParam(segment string) bool {
	return strings.HasPrefix(segment, "{") && strings.HasSuffix(segment, "}")
}

func isJSON(mediaType string) bool {
	return mediaType == "application/json" || strings.HasSuffix(mediaType, "+json")
}

// escape escapes a key for a JSON pointer (RFC 6901).
func escape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// lookup returns the value at a JSON pointer of the document.
func (d *openAPIDoc) lookup(ptr string) (any, bool) {
	var v any = d.raw
	if ptr == "" {
		return v, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func (d *openAPIDoc) mapAt(ptr string) map[string]any {
	v, _ := d.lookup(ptr)
	m, _ := v.(map[string]any)
	return m
}

// resolve follows the $ref of the object at ptr, if it has one, and
// returns the pointer of the object it names.
func (d *openAPIDoc) resolve(ptr string) (string, error) {
	for range 10 {
		v, ok := d.lookup(ptr)
		if !ok {
			return "", fmt.Errorf("nothing at #%s", ptr)
		}
		m, _ := v.(map[string]any)
		ref, isRef := m["$ref"].(string)
		if !isRef {
			return ptr, nil
		}
		if !strings.HasPrefix(ref, "#") {
			return "", fmt.Errorf("#%s: $ref %q is not within the document", ptr, ref)
		}
		ptr = strings.TrimPrefix(ref, "#")
	}
	return "", fmt.Errorf("#%s: $refs too deep", ptr)
}

// eachResponse calls f with the pointer and object of every response of
// every operation, references resolved.
func (d *openAPIDoc) eachResponse(f func(ptr string, resp map[string]any) error) error {
	for _, t := range d.tmpl {
		for _, m := range methods {
			op := "/paths/" + escape(t.path) + "/" + m
			for status := range d.mapAt(op + "/responses") {
				ptr, err := d.resolve(op + "/responses/" + escape(status))
				if err != nil {
					return err
				}
				if err := f(ptr, d.mapAt(ptr)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// operation returns the template of the document that matches path (as
// sent, percent-encoded, relative to apiPrefix): the one with the most
// literal segments, as the router prefers a static segment.
func (d *openAPIDoc) operation(path string) (pathTemplate, bool) {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var best pathTemplate
	found := false
	for _, t := range d.tmpl {
		if len(t.segments) != len(segs) {
			continue
		}
		match := true
		for i, s := range t.segments {
			if !isParam(s) && s != segs[i] || isParam(s) && segs[i] == "" {
				match = false
				break
			}
		}
		if match && (!found || t.literals > best.literals) {
			best, found = t, true
		}
	}
	return best, found
}

// check checks an answer of the API against the document: the method
// and path (as sent, with the API's prefix) are an operation, the status
// one of its responses, the Content-Type one of that response's media
// types, and a JSON body valid against its schema. It returns what does
// not match; nil for a path outside the API.
func (d *openAPIDoc) check(method, path string, status int, header http.Header, body []byte) error {
	rel, ok := strings.CutPrefix(path, apiPrefix)
	if !ok || rel != "" && rel[0] != '/' {
		return nil
	}
	t, ok := d.operation(rel)
	if !ok {
		return fmt.Errorf("no path of the document matches %s", rel)
	}
	op := "/paths/" + escape(t.path) + "/" + strings.ToLower(method)
	if _, ok := d.lookup(op); !ok {
		return fmt.Errorf("the document has no operation %s %s", method, t.path)
	}
	rptr := op + "/responses/" + strconv.Itoa(status)
	if _, ok := d.lookup(rptr); !ok {
		return fmt.Errorf("%s %s: status %d is not a documented response", method, t.path, status)
	}
	rptr, err := d.resolve(rptr)
	if err != nil {
		return err
	}
	content := d.mapAt(rptr + "/content")
	ct := header.Get("Content-Type")
	if len(content) == 0 {
		if len(body) > 0 {
			return fmt.Errorf("%s %s %d: the document says no content, the answer has %d bytes of %s", method, t.path, status, len(body), ct)
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("%s %s %d: Content-Type %q: %v", method, t.path, status, ct, err)
	}
	key := mt
	if _, ok := content[key]; !ok {
		key = strings.Split(mt, "/")[0] + "/*"
		if _, ok := content[key]; !ok {
			key = "*/*"
		}
	}
	if _, ok := content[key]; !ok {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range content {
				if !yield(k) {
					return
				}
			}
		})
		return fmt.Errorf("%s %s %d: Content-Type %s is none of the documented %v", method, t.path, status, mt, keys)
	}
	if !isJSON(key) {
		return nil
	}
	sptr := rptr + "/content/" + escape(key) + "/schema"
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s %d: the body is not JSON: %v", method, t.path, status, err)
	}
	if err := d.schemas[sptr].Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			err = prune(ve)
		}
		return fmt.Errorf("%s %s %d: the body does not match #%s: %v", method, t.path, status, sptr, err)
	}
	return nil
}

// prune drops the "false schema" errors of unevaluatedProperties beside
// the errors that caused them: when a $ref'd part of a schema fails, its
// properties count as unevaluated, and each would be listed.
func prune(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	p := *e
	p.Causes = nil
	for _, c := range e.Causes {
		if _, isFalse := c.ErrorKind.(*kind.FalseSchema); !isFalse || len(c.Causes) > 0 {
			p.Causes = append(p.Causes, prune(c))
		}
	}
	if len(p.Causes) == 0 {
		p.Causes = e.Causes
	}
	return &p
}

// checkAnswer fails the test when an answer of the API does not match
// the document. Every request of the API's tests goes through it.
func checkAnswer(t *testing.T, method, path string, r response) {
	t.Helper()
	d, err := loadDoc()
	if err != nil {
		t.Errorf("openapi.yaml: %v", err)
		return
	}
	if err := d.check(method, path, r.status, r.header, r.body); err != nil {
		body := r.body
		if len(body) > 2000 {
			body = append(body[:2000:2000], "…"...)
		}
		t.Errorf("%s %s = %d: the answer breaks the API's contract (internal/api/openapi.yaml): %v\nbody: %s", method, path, r.status, err, body)
	}
}

// allOptions are Options that serve every route. The fakes are never
// called: the router is only walked.
func allOptions() api.Options {
	return api.Options{
		Queue: struct{ api.Enqueuer }{}, Store: struct{ api.Reader }{}, Logger: zap.NewNop(),
		Resender: struct{ api.Resender }{}, Inbox: struct{ api.InboxReader }{}, Tracer: struct{ api.Tracer }{},
		Interchanges: struct{ api.InterchangeReader }{}, Canceller: struct{ api.Canceller }{},
		Reapplier: struct{ api.Reapplier }{}, Reports: struct{ api.Reports }{},
		Partners: struct{ api.PartnerService }{}, PartnerReader: struct{ api.PartnerReader }{},
		Connectors: struct{ api.ConnectorService }{}, ConnectorReader: struct{ api.ConnectorReader }{},
		TestPartner: func(context.Context, string) (any, bool) { return nil, false },
		Audit:       struct{ api.AuditReader }{}, Users: struct{ api.UserService }{},
	}
}

// operations are the document's operations as "METHOD /path".
func (d *openAPIDoc) operations() []string {
	var ops []string
	for _, t := range d.tmpl {
		for _, m := range methods {
			if _, ok := d.lookup("/paths/" + escape(t.path) + "/" + m); ok {
				ops = append(ops, strings.ToUpper(m)+" "+t.path)
			}
		}
	}
	sort.Strings(ops)
	return ops
}

// TestOpenAPIMatchesRouter walks the router of the API with every route
// served: each routed method and path is an operation of the document,
// and each operation of the document is routed.
func TestOpenAPIMatchesRouter(t *testing.T) {
	d, err := loadDoc()
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(allOptions())
	if err != nil {
		t.Fatal(err)
	}
	var routed []string
	err = chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed = append(routed, method+" "+strings.TrimSuffix(route, "/"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(routed)
	if diff := cmp.Diff(routed, d.operations()); diff != "" {
		t.Errorf("routes and the operations of internal/api/openapi.yaml differ (-routed +documented): document each route, and only routes:\n%s", diff)
	}
}

// TestOpenAPIDocument checks the document's structure as OpenAPI 3.1
// defines it: the required fields, unique operation ids, a response with
// a description for each documented status, each path parameter
// declared, every $ref resolving within the document, and every schema
// compiling as JSON Schema 2020-12.
func TestOpenAPIDocument(t *testing.T) {
	d, err := loadDoc()
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := d.raw["openapi"].(string); !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	for _, f := range []string{"/info/title", "/info/version"} {
		if v, _ := d.lookup(f); v == "" || v == nil {
			t.Errorf("%s is missing", f)
		}
	}
	if len(d.tmpl) == 0 {
		t.Fatal("no paths")
	}
	for name := range d.mapAt("") {
		if !slices.Contains([]string{"openapi", "info", "jsonSchemaDialect", "servers", "paths", "webhooks", "components", "security", "tags", "externalDocs"}, name) && !strings.HasPrefix(name, "x-") {
			t.Errorf("unknown top-level field %q", name)
		}
	}
	security, _ := d.raw["security"].([]any)
	if len(security) == 0 {
		t.Error("no security requirement: every operation needs a token")
	}
	for _, sec := range security {
		req, _ := sec.(map[string]any)
		for name := range req {
			if _, ok := d.lookup("/components/securitySchemes/" + escape(name)); !ok {
				t.Errorf("security names %q, which is not in components.securitySchemes", name)
			}
		}
	}

	ids := map[string]string{}
	statusKey := regexp.MustCompile(`^[1-5][0-9][0-9]$`)
	for _, tp := range d.tmpl {
		if !strings.HasPrefix(tp.path, "/") {
			t.Errorf("path %q does not start with /", tp.path)
		}
		item := "/paths/" + escape(tp.path)
		for _, m := range methods {
			op := item + "/" + m
			if _, ok := d.lookup(op); !ok {
				continue
			}
			name := strings.ToUpper(m) + " " + tp.path
			id, _ := d.mapAt(op)["operationId"].(string)
			if id == "" {
				t.Errorf("%s has no operationId", name)
			} else if other, dup := ids[id]; dup {
				t.Errorf("%s and %s share the operationId %q", other, name, id)
			}
			ids[id] = name
			responses := d.mapAt(op + "/responses")
			if len(responses) == 0 {
				t.Errorf("%s has no responses", name)
			}
			for status := range responses {
				if !statusKey.MatchString(status) {
					t.Errorf("%s: response %q is not a status code", name, status)
					continue
				}
				ptr, err := d.resolve(op + "/responses/" + escape(status))
				if err != nil {
					t.Errorf("%s %s: %v", name, status, err)
					continue
				}
				if desc, _ := d.mapAt(ptr)["description"].(string); desc == "" {
					t.Errorf("%s %s: no description", name, status)
				}
			}
			// The path parameters, of the path item and the operation,
			// are exactly the template's.
			declared := map[string]bool{}
			for _, list := range []string{item + "/parameters", op + "/parameters"} {
				ps, _ := d.lookup(list)
				params, _ := ps.([]any)
				for i := range params {
					ptr, err := d.resolve(fmt.Sprintf("%s/%d", list, i))
					if err != nil {
						t.Errorf("%s: %v", name, err)
						continue
					}
					p := d.mapAt(ptr)
					pname, _ := p["name"].(string)
					in, _ := p["in"].(string)
					if pname == "" || !slices.Contains([]string{"query", "header", "path", "cookie"}, in) || p["schema"] == nil {
						t.Errorf("%s: parameter #%s wants a name, in (query, header, path or cookie) and a schema", name, ptr)
					}
					if in == "path" {
						if p["required"] != true {
							t.Errorf("%s: path parameter %s is not required: true", name, pname)
						}
						declared[pname] = true
					}
				}
			}
			var inTemplate []string
			for _, s := range tp.segments {
				if isParam(s) {
					inTemplate = append(inTemplate, strings.Trim(s, "{}"))
				}
			}
			var decl []string
			for p := range declared {
				decl = append(decl, p)
			}
			sort.Strings(inTemplate)
			sort.Strings(decl)
			if diff := cmp.Diff(inTemplate, decl); diff != "" {
				t.Errorf("%s: path parameters (-template +declared):\n%s", name, diff)
			}
		}
	}

	// Every $ref resolves within the document.
	var walk func(ptr string, v any)
	walk = func(ptr string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				target, isLocal := strings.CutPrefix(ref, "#")
				if _, found := d.lookup(target); !isLocal || !found {
					t.Errorf("#%s: $ref %q does not resolve within the document", ptr, ref)
				}
			}
			for k, e := range v {
				walk(ptr+"/"+escape(k), e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s/%d", ptr, i), e)
			}
		}
	}
	walk("", d.raw)
}

// TestOpenAPIServed: GET /api/v1/openapi.json answers the document to
// any caller of the API, and nothing without a token.
func TestOpenAPIServed(t *testing.T) {
	e := setup(t)
	r := e.do(t, http.MethodGet, "/api/v1/openapi.json", "", nil, token)
	want, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || !bytes.Equal(r.body, want) {
		t.Errorf("GET /api/v1/openapi.json = %d %s, %d bytes; want 200 application/json, the %d bytes of api.OpenAPI", r.status, r.header.Get("Content-Type"), len(r.body), len(want))
	}
	if !json.Valid(r.body) {
		t.Errorf("GET /api/v1/openapi.json is not JSON")
	}
	if r := e.do(t, http.MethodGet, "/api/v1/openapi.json", "", nil, ""); r.status != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/openapi.json without a token = %d, want 401", r.status)
	}
}

// TestOpenAPICheck: the check every API test's answers go through fails
// an answer that breaks the document: a missing required field, a field
// the schema does not have, a wrong type or enum value, an undocumented
// status, path, method or content type.
func TestOpenAPICheck(t *testing.T) {
	d, err := loadDoc()
	if err != nil {
		t.Fatal(err)
	}
	const tokenJSON = `{"name": "ci", "role": "viewer", "state": "active", "created_at": "2026-12-01T10:00:00Z", "created_by": "alice",
		"expires_at": null, "last_used_at": null, "revoked_at": "2026-12-02T10:00:00.5+01:00"}`
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		name         string
		method, path string
		status       int
		header       http.Header
		body         string
		want         string // in the error; "" for none
	}{
		{"valid", "DELETE", "/api/v1/users/alice/tokens/ci", 200, jsonCT, tokenJSON, ""},
		{"valid error", "GET", "/api/v1/messages/7", 404, jsonCT, `{"error": "no message 7", "parameter": "id"}`, ""},
		{"not the API", "GET", "/console/", 200, http.Header{"Content-Type": {"text/html"}}, "<html>", ""},
		{"raw payload", "GET", "/api/v1/messages/7/payload", 200, http.Header{"Content-Type": {"application/EDI-X12"}}, "ISA*00*", ""},
		{"text/plain 413", "POST", "/api/v1/messages", 413, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, "too large", ""},
		{"escaped partner ID", "GET", "/api/v1/partners/A%2FB/history", 404, jsonCT, `{"error": "no partner"}`, ""},
		{"missing required field", "DELETE", "/api/v1/users/alice/tokens/ci", 200, jsonCT, strings.Replace(tokenJSON, `"state": "active", `, "", 1), "missing property 'state'"},
		{"unknown field", "GET", "/api/v1/messages/7", 404, jsonCT, `{"error": "no message 7", "stack": "..."}`, "stack"},
		{"wrong type", "GET", "/api/v1/messages/7", 404, jsonCT, `{"error": 7}`, "want string"},
		{"not in the enum", "DELETE", "/api/v1/users/alice/tokens/ci", 200, jsonCT, strings.Replace(tokenJSON, `"active"`, `"paused"`, 1), "must be one of"},
		{"not a date-time", "DELETE", "/api/v1/users/alice/tokens/ci", 200, jsonCT, strings.Replace(tokenJSON, `"2026-12-01T10:00:00Z"`, `"yesterday"`, 1), "date-time"},
		{"undocumented status", "GET", "/api/v1/messages/7", 418, jsonCT, `{"error": "teapot"}`, "status 418 is not a documented response"},
		{"undocumented path", "GET", "/api/v1/messages/7/secrets", 200, jsonCT, `{}`, "no path of the document matches"},
		{"undocumented method", "PATCH", "/api/v1/messages/7", 200, jsonCT, `{}`, "no operation PATCH /messages/{id}"},
		{"undocumented content type", "GET", "/api/v1/messages/7", 404, http.Header{"Content-Type": {"text/html"}}, "<p>no</p>", "none of the documented"},
		{"not JSON", "GET", "/api/v1/messages/7", 404, jsonCT, "no message", "not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.check(tt.method, tt.path, tt.status, tt.header, []byte(tt.body))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("check(%s %s %d) = %v, want nil", tt.method, tt.path, tt.status, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("check(%s %s %d) = %v, want an error saying %q", tt.method, tt.path, tt.status, err, tt.want)
			}
		})
	}
}

// TestOpenAPICheckNamesCause: an answer that lacks a field of a schema
// composed with $ref (a message) fails naming the field, without an
// error for each of its other properties.
func TestOpenAPICheckNamesCause(t *testing.T) {
	d, err := loadDoc()
	if err != nil {
		t.Fatal(err)
	}
	m := api.DetailView(api.Message{ID: 7, Direction: "outbound", Status: "queued"}, nil)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	header := http.Header{"Content-Type": {"application/json"}}
	if err := d.check("GET", "/api/v1/messages/7", 200, header, b); err != nil {
		t.Fatalf("check(a message) = %v, want nil", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	delete(obj, "size")
	if b, err = json.Marshal(obj); err != nil {
		t.Fatal(err)
	}
	err = d.check("GET", "/api/v1/messages/7", 200, header, b)
	if err == nil || !strings.Contains(err.Error(), "missing property 'size'") || strings.Contains(err.Error(), "false schema") {
		t.Errorf("check(a message without size) = %v, want an error naming size alone", err)
	}
}
