package auth_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/auth"
)

func TestParseRole(t *testing.T) {
	tests := []struct {
		give string
		want auth.Role
	}{{"viewer", auth.RoleViewer}, {"operator", auth.RoleOperator}, {"admin", auth.RoleAdmin}}
	for _, tt := range tests {
		got, err := auth.ParseRole(tt.give)
		if err != nil || got != tt.want || got.String() != tt.give {
			t.Errorf("ParseRole(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "Admin", "root", "viewer "} {
		if _, err := auth.ParseRole(bad); !errors.Is(err, auth.ErrUnknownRole) {
			t.Errorf("ParseRole(%q) = %v, want ErrUnknownRole", bad, err)
		}
	}
}

func TestRoleAllows(t *testing.T) {
	// want[have][need]
	want := map[auth.Role]map[auth.Role]bool{
		0:                 {auth.RoleViewer: false, auth.RoleOperator: false, auth.RoleAdmin: false},
		auth.RoleViewer:   {auth.RoleViewer: true, auth.RoleOperator: false, auth.RoleAdmin: false},
		auth.RoleOperator: {auth.RoleViewer: true, auth.RoleOperator: true, auth.RoleAdmin: false},
		auth.RoleAdmin:    {auth.RoleViewer: true, auth.RoleOperator: true, auth.RoleAdmin: true},
	}
	for have, needs := range want {
		for need, w := range needs {
			if got := have.Allows(need); got != w {
				t.Errorf("%q.Allows(%s) = %v, want %v", have, need, got, w)
			}
		}
	}
}

func TestPrincipalActor(t *testing.T) {
	tests := []struct {
		give auth.Principal
		want string
	}{
		{auth.Principal{Kind: auth.KindUser, User: "alice", UserID: 1, Role: auth.RoleAdmin}, "user:alice"},
		{auth.Principal{Kind: auth.KindToken, User: "alice", UserID: 1, TokenName: "ci", Role: auth.RoleViewer}, "token:ci (alice)"},
		{auth.BootstrapPrincipal, "bootstrap-token"},
		{auth.CLIPrincipal("root@host"), "cli:root@host"},
		{auth.Principal{}, "anonymous"},
	}
	for _, tt := range tests {
		if got := tt.give.Actor(); got != tt.want {
			t.Errorf("%+v.Actor() = %q, want %q", tt.give, got, tt.want)
		}
	}
	ctx := auth.WithPrincipal(context.Background(), tests[1].give)
	if p, ok := auth.FromContext(ctx); !ok || p != tests[1].give {
		t.Errorf("FromContext(WithPrincipal(p)) = %+v, %v; want p", p, ok)
	}
	if _, ok := auth.FromContext(context.Background()); ok {
		t.Error("FromContext(Background) found a principal")
	}
}

func TestNewToken(t *testing.T) {
	re := regexp.MustCompile(`^edh_[A-Za-z0-9_-]{43}$`)
	a, b := auth.NewToken(), auth.NewToken()
	if !re.MatchString(a) || a == b {
		t.Errorf("NewToken = %q, %q; want two different tokens of the form %s", a, b, re)
	}
	sum := sha256.Sum256([]byte(a))
	if got := auth.HashToken(a); string(got) != string(sum[:]) {
		t.Errorf("HashToken = %x, want the SHA-256 %x", got, sum)
	}
}

func TestParseLifetime(t *testing.T) {
	tests := []struct {
		give string
		want time.Duration
	}{{"90d", 90 * 24 * time.Hour}, {"1d", 24 * time.Hour}, {"36h", 36 * time.Hour}, {"90m", 90 * time.Minute}}
	for _, tt := range tests {
		if got, err := auth.ParseLifetime(tt.give); err != nil || got != tt.want {
			t.Errorf("ParseLifetime(%q) = %s, %v; want %s", tt.give, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "0d", "-1d", "d", "90", "1y", "0s", "-5h", "99999999d"} {
		if _, err := auth.ParseLifetime(bad); !errors.Is(err, auth.ErrBadExpiry) {
			t.Errorf("ParseLifetime(%q) = %v, want ErrBadExpiry", bad, err)
		}
	}
}
