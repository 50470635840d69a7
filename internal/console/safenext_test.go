package console

import "testing"

// TestSafeNext: after sign-in the browser goes only to a console page;
// anything else (another part of the server, another host however
// spelled, the sign-in page itself, a path that leaves the console by
// dot segments) goes to the messages.
func TestSafeNext(t *testing.T) {
	const home = "/console/messages"
	tests := []struct {
		give, want string
	}{
		{"/console/messages?status=failed", "/console/messages?status=failed"},
		{"/console/messages/7", "/console/messages/7"},
		{"/console/partners/ACME%20CORP", "/console/partners/ACME%20CORP"},
		{"", home},
		{"/", home},
		{"/console", home},
		{"/consolex/messages", home},
		{"/api/v1/messages", home},
		{"/metrics", home},
		{"//evil.example/console/messages", home},
		{"///evil.example/console/messages", home},
		{"/\\evil.example/console/messages", home},
		{"/console/\\evil.example", home},
		{"\\\\evil.example/console/messages", home},
		{"https://evil.example/console/messages", home},
		{"http:/console/messages", home},
		{"javascript:alert(1)", home},
		{"/%2F%2Fevil.example/console/messages", home},
		{"%2F%2Fevil.example", home},
		{"/%5Cevil.example", home},
		{"/console/../api/v1/messages", home},
		{"/console/%2e%2e/api/v1/messages", home},
		{"/console/./../metrics", home},
		{"/console/login", home},
		{"/console/login?next=/console/users", home},
	}
	for _, tt := range tests {
		if got := safeNext(tt.give); got != tt.want {
			t.Errorf("safeNext(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
