package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/leader"
)

func replicaServer(t *testing.T, s leader.Status) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/leader" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(s)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestStatusCommand(t *testing.T) {
	a := leader.Status{Identity: "a-1", IsLeader: true, Holder: "a-1", FencingToken: 42, Backend: "kubernetes"}
	b := leader.Status{Identity: "b-1", Holder: "a-1", Backend: "kubernetes"}
	bOther := leader.Status{Identity: "b-1", Holder: "c-1", Backend: "kubernetes"}
	bLeads := leader.Status{Identity: "b-1", IsLeader: true, Holder: "b-1", FencingToken: 43, Backend: "kubernetes"}
	none := leader.Status{Identity: "c-1", Backend: "kubernetes"}
	tests := []struct {
		name     string
		give     []leader.Status
		wantErr  bool
		wantText []string
	}{
		{name: "one leader, all agree", give: []leader.Status{a, b}, wantText: []string{"holder a-1, fencing token 42", "b-1"}},
		{name: "nobody leads", give: []leader.Status{none, b}, wantErr: true, wantText: []string{"c-1"}},
		{name: "two leaders", give: []leader.Status{a, bLeads}, wantErr: true},
		{name: "disagree on holder", give: []leader.Status{a, bOther}, wantErr: true, wantText: []string{"c-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var urls []string
			for _, s := range tt.give {
				urls = append(urls, replicaServer(t, s))
			}
			out, _, err := runCmd(t, env("EDIHUB_OPS_URLS", strings.Join(urls, ",")), "status")
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, errNoConsensus)) {
				t.Errorf("edihub status = %v, want error %v (errNoConsensus)", err, tt.wantErr)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if _, _, err := runCmd(t, env(), "status"); err == nil || !strings.Contains(err.Error(), "EDIHUB_OPS_URLS") {
		t.Errorf("edihub status without URLs = %v, want a message naming EDIHUB_OPS_URLS", err)
	}
}
