package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestBinaryAPIListener: with EDIHUB_API_ADDR the REST API and the console
// are served on their own listener and the AS2 listener no longer answers
// under /api or /console; without it, both stay on the AS2 listener.
func TestBinaryAPIListener(t *testing.T) {
	const token = "s3cret-token"
	request := func(method, url string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	t.Run("separate", func(t *testing.T) {
		p := startReplica(t, "EDIHUB_API_ADDR=127.0.0.1:0", "EDIHUB_API_TOKEN="+token)
		if p.api == "" {
			t.Fatalf("no api_addr in the start line; log:\n%s", p.log())
		}
		tests := []struct {
			method, url string
			want        int
		}{
			{http.MethodGet, p.api + "/api/v1/messages", http.StatusOK},
			{http.MethodGet, p.as2 + "/api/v1/messages", http.StatusNotFound},
			{http.MethodGet, p.api + "/console/login", http.StatusOK},
			{http.MethodGet, p.as2 + "/console/login", http.StatusNotFound},
			{http.MethodGet, p.as2 + "/console/", http.StatusNotFound},
			{http.MethodPost, p.as2 + "/console/login", http.StatusNotFound},
			{http.MethodPost, p.api + "/as2", http.StatusNotFound},
			// The AS2 endpoint is still there: a body that is no AS2
			// message is refused by the receiver, not unrouted.
			{http.MethodGet, p.as2 + "/as2", http.StatusMethodNotAllowed},
		}
		for _, tt := range tests {
			if got := request(tt.method, tt.url); got != tt.want {
				t.Errorf("%s %s = %d, want %d", tt.method, tt.url, got, tt.want)
			}
		}
	})
	t.Run("shared", func(t *testing.T) {
		p := startReplica(t, "EDIHUB_API_TOKEN="+token)
		if p.api != "" {
			t.Errorf("api_addr %s without EDIHUB_API_ADDR", p.api)
		}
		if got := request(http.MethodGet, p.as2+"/api/v1/messages"); got != http.StatusOK {
			t.Errorf("GET /api/v1/messages on the AS2 listener = %d, want 200", got)
		}
		if got := request(http.MethodGet, p.as2+"/console/login"); got != http.StatusOK {
			t.Errorf("GET /console/login on the AS2 listener = %d, want 200", got)
		}
	})
}
