package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	yaml "go.yaml.in/yaml/v3"
)

// openAPIYAML is the API's OpenAPI 3.1 description, maintained by hand
// beside the handlers it describes.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON converts openAPIYAML once.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("decode openapi.yaml: %w", err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode openapi.yaml as JSON: %w", err)
	}
	return append(b, '\n'), nil
})

// OpenAPI returns the OpenAPI 3.1 document of the API as JSON: every
// route New serves with all Options set, its parameters, request bodies
// and the schema of each answer by status. Its paths are relative to
// the mount point (its server URL is /api/v1). It holds no secrets and
// nothing of the configuration. The error is the embedded document's,
// which the package's tests rule out.
func OpenAPI() ([]byte, error) { return openAPIJSON() }

// openAPI answers GET /openapi.json.
func (h *handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	b, err := OpenAPI()
	if err != nil {
		h.internal(w, "read the OpenAPI document", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
