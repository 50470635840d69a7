package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/edihub/edihub/test/cluster"
)

// TestDemoFront: each demo partner mode does to a document what -demo-mode
// says, and PUT /demo-mode switches modes while it runs.
func TestDemoFront(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	station := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer station.Close()
	addr, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	f, err := startDemoFront(addr, strings.TrimPrefix(station.URL, "http://"), modeNormal)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := bytes.Repeat([]byte("0123456789abcdef"), 64)

	tests := []struct {
		mode       string
		wantCode   int
		wantPassed bool // the station got the document
		wantSame   bool // unaltered
	}{
		{modeNormal, http.StatusOK, true, true},
		{modeNegative, http.StatusOK, true, false},
		{modeSilent, http.StatusOK, false, false},
		{modeRefuse, http.StatusForbidden, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/demo-mode", strings.NewReader(tt.mode+"\n"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != tt.mode {
				t.Fatalf("PUT /demo-mode %s = %d %q, want 200 %q", tt.mode, resp.StatusCode, b, tt.mode)
			}
			mu.Lock()
			got = nil
			mu.Unlock()
			resp, err = http.Post("http://"+addr+"/as2", "application/pkcs7-mime", bytes.NewReader(doc))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Errorf("POST /as2 in mode %s = %d, want %d", tt.mode, resp.StatusCode, tt.wantCode)
			}
			mu.Lock()
			defer mu.Unlock()
			if passed := len(got) == 1; passed != tt.wantPassed {
				t.Fatalf("mode %s: the station got %d documents, want passed %v", tt.mode, len(got), tt.wantPassed)
			}
			if tt.wantPassed {
				diff := 0
				for i := range doc {
					if i < len(got[0]) && got[0][i] != doc[i] {
						diff++
					}
				}
				if len(got[0]) != len(doc) || (diff == 0) != tt.wantSame || diff > 1 {
					t.Errorf("mode %s: the station got %d bytes, %d of them altered; want %d, altered %v (one byte)", tt.mode, len(got[0]), diff, len(doc), !tt.wantSame)
				}
			}
		})
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/demo-mode", strings.NewReader("chaos"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("PUT /demo-mode chaos = %d, want 400", resp.StatusCode)
	}
}
