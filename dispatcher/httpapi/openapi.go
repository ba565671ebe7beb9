package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the API's OpenAPI 3.1 document; a test checks its paths
// and methods against the route table.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the API's OpenAPI 3.1 document (JSON), also served at
// GET /v1/openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

// openAPI is GET /v1/openapi.json.
func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
}
