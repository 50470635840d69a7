package oidc

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReadClaimsGroupShapes: the groups claim as providers send it.
func TestReadClaimsGroupShapes(t *testing.T) {
	tests := []struct {
		name      string
		claim     string
		give      string // the claims, JSON
		want      []string
		wantFound bool
		wantErr   error
	}{
		{"list", "groups", `{"groups":["a","b"]}`, []string{"a", "b"}, true, nil},
		{"one string", "groups", `{"groups":"a"}`, []string{"a"}, true, nil},
		{"empty list", "groups", `{"groups":[]}`, []string{}, true, nil},
		{"absent", "groups", `{"roles":["a"]}`, nil, false, nil},
		{"Keycloak realm roles", "realm_access.roles", `{"realm_access":{"roles":["edi-admins"]}}`, []string{"edi-admins"}, true, nil},
		{"claim with dots first", "https://hub.example/groups", `{"https://hub.example/groups":["x"]}`, []string{"x"}, true, nil},
		{"path through a list", "a.b", `{"a":["b"]}`, nil, false, nil},
		{"number", "groups", `{"groups":7}`, nil, false, ErrProvider},
		{"list of objects", "groups", `{"groups":[{"id":"a"}]}`, nil, false, ErrProvider},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var claims map[string]any
			if err := json.Unmarshal([]byte(tt.give), &claims); err != nil {
				t.Fatal(err)
			}
			p := &Provider{opts: Options{GroupsClaim: tt.claim}}
			var id Identity
			got, found, err := p.readClaims(&id, claims)
			if !errors.Is(err, tt.wantErr) || found != tt.wantFound || !cmp.Equal(got, tt.want) {
				t.Errorf("readClaims(%s) = %q, %v, %v; want %q, %v, %v", tt.give, got, found, err, tt.want, tt.wantFound, tt.wantErr)
			}
		})
	}
}

func TestReadClaimsKeepsWhatItHas(t *testing.T) {
	p := &Provider{opts: Options{GroupsClaim: "groups"}}
	id := Identity{Name: "From ID Token"}
	if _, _, err := p.readClaims(&id, map[string]any{"name": "From UserInfo", "preferred_username": "x", "email": "a@example.test", "email_verified": "true"}); err != nil {
		t.Fatal(err)
	}
	want := Identity{Name: "From ID Token", Email: "a@example.test", EmailVerified: true}
	if diff := cmp.Diff(want, id); diff != "" {
		t.Errorf("identity (-want +got):\n%s", diff)
	}
}
