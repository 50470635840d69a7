package api

import (
	"net/http"

	"github.com/edihub/edihub/internal/httpserver"
)

// apiError is every error body.
type apiError struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
}

func writeError(w http.ResponseWriter, status int, param, msg string) {
	httpserver.WriteJSON(w, status, apiError{Error: msg, Parameter: param})
}
