package connector_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/connector"
)

// TestS3ClassifiesAnswers: what an S3 server answers maps to the error
// class the dispatcher acts on. The server is a stand-in answering every
// request alike (a real gateway does not answer 503 on demand).
func TestS3ClassifiesAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		code   string
		want   error
	}{
		{"slow down", http.StatusServiceUnavailable, "SlowDown", connector.ErrUnavailable},
		{"internal error", http.StatusInternalServerError, "InternalError", connector.ErrUnavailable},
		{"access denied", http.StatusForbidden, "AccessDenied", connector.ErrRefused},
		{"no such bucket", http.StatusNotFound, "NoSuchBucket", connector.ErrRefused},
		{"no such key", http.StatusNotFound, "NoSuchKey", connector.ErrNotFound},
		{"bad request", http.StatusBadRequest, "InvalidArgument", connector.ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>m</Message></Error>`, tt.code)
			}))
			t.Cleanup(srv.Close)
			c, err := connector.NewS3(connector.S3Options{
				Endpoint: srv.URL, Bucket: "b", PathStyle: true, AccessKey: "id", SecretKey: "s3cr3t-value", Timeout: 5 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Open(t.Context(), connector.Object{Path: "x.edi"})
			if !errors.Is(err, tt.want) {
				t.Errorf("Open against %d %s = %v, want %v", tt.status, tt.code, err, tt.want)
			}
			if strings.Contains(fmt.Sprint(err), "s3cr3t-value") {
				t.Errorf("the error shows the credentials: %v", err)
			}
		})
	}
}

// TestS3SlowServerUnavailable: a server that accepts a request and does
// not answer within the timeout makes the call fail as unavailable.
func TestS3SlowServerUnavailable(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	c, err := connector.NewS3(connector.S3Options{
		Endpoint: srv.URL, Bucket: "b", PathStyle: true, AccessKey: "id", SecretKey: "key", Timeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(t.Context(), remotePut("x.edi", "x")); !errors.Is(err, connector.ErrUnavailable) {
		t.Errorf("Write to a server that does not answer = %v, want ErrUnavailable", err)
	}
}
