package auth_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/auth"
)

// Hashes made by the reference implementation (libargon2, through
// argon2id_hash_encoded) of "correct horse battery staple" with the salt
// "edihub-kat-salt!": OWASP's parameters, and others, so that parameters,
// salt and key length are read back from the string.
const (
	katPassword = "correct horse battery staple"
	katOWASP    = "$argon2id$v=19$m=19456,t=2,p=1$ZWRpaHViLWthdC1zYWx0IQ$tqW0VKdd/9cY+P6HYZ33QfmMPk1KrD15blmYL3Dj750"
	katSmall    = "$argon2id$v=19$m=64,t=1,p=2$ZWRpaHViLWthdC1zYWx0IQ$DyjHrMfodKV0p2+MRw527g"
)

// TestCheckPasswordReference: hashes of the reference implementation check
// with their password only.
func TestCheckPasswordReference(t *testing.T) {
	for _, hash := range []string{katOWASP, katSmall} {
		for _, tt := range []struct {
			give string
			want bool
		}{{katPassword, true}, {katPassword + " ", false}, {"Correct horse battery staple", false}, {"", false}} {
			got, err := auth.CheckPassword(hash, tt.give)
			if err != nil || got != tt.want {
				t.Errorf("CheckPassword(%s, %q) = %v, %v; want %v", hash, tt.give, got, err, tt.want)
			}
		}
	}
}

// TestHashPassword: the PHC string of OWASP's parameters with a 16-byte
// salt and a 32-byte key, a new salt each time, checked back.
func TestHashPassword(t *testing.T) {
	re := regexp.MustCompile(`^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)
	h1, h2 := auth.HashPassword(katPassword), auth.HashPassword(katPassword)
	if !re.MatchString(h1) {
		t.Errorf("HashPassword = %q, want the form %s", h1, re)
	}
	if h1 == h2 {
		t.Error("two hashes of one password are equal: the salt is not random")
	}
	for _, h := range []string{h1, cheap.Hash(katPassword)} {
		if ok, err := auth.CheckPassword(h, katPassword); !ok || err != nil {
			t.Errorf("CheckPassword(%s, the password) = %v, %v; want true", h, ok, err)
		}
		if ok, _ := auth.CheckPassword(h, "another password"); ok {
			t.Errorf("CheckPassword(%s, another password) = true", h)
		}
	}
}

func TestNeedsRehash(t *testing.T) {
	tests := []struct {
		hash string
		p    auth.Params
		want bool
	}{
		{katOWASP, auth.DefaultParams, false},
		{katSmall, auth.DefaultParams, true}, // memory, time and key length below
		{katSmall, cheap, true},              // 16-byte key
		{cheap.Hash("x"), cheap, false},      // same parameters
		{katOWASP, auth.Params{Memory: 19456, Time: 3, Threads: 1}, true},
		{"$2a$10$bcrypt-hash", auth.DefaultParams, true}, // unreadable: rehash
	}
	for _, tt := range tests {
		if got := auth.NeedsRehash(tt.hash, tt.p); got != tt.want {
			t.Errorf("NeedsRehash(%s, %+v) = %v, want %v", tt.hash, tt.p, got, tt.want)
		}
	}
}

// TestCheckPasswordMalformed: a hash that cannot be read, or whose
// parameters would stall a login, is an error, never a match.
func TestCheckPasswordMalformed(t *testing.T) {
	salt, key := "ZWRpaHViLWthdC1zYWx0IQ", "tqW0VKdd/9cY+P6HYZ33QfmMPk1KrD15blmYL3Dj750"
	for _, h := range []string{
		"",
		"plain",
		"$argon2i$v=19$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2$" + salt + "$" + key + "$",
		"$argon2id$v=19$m=19456,t=2,p=1,x=3$" + salt + "$" + key,
		"$argon2id$v=19$m=4194304,t=2,p=1$" + salt + "$" + key, // 4 GiB
		"$argon2id$v=19$m=19456,t=1000,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=0,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=0$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + "c2hvcnQ", // 5-byte key
		"$argon2id$v=19$m=19456,t=2,p=1$" + "c2Fs" + "$" + key,     // 3-byte salt
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + key + "=", // padding
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + strings.ReplaceAll(key, "/", "_"),
	} {
		ok, err := auth.CheckPassword(h, katPassword)
		if ok || err == nil {
			t.Errorf("CheckPassword(%q) = %v, %v; want false and an error", h, ok, err)
		}
	}
}

func TestPasswordPolicy(t *testing.T) {
	tests := []struct {
		name, password string
		wantErr        string
	}{
		{"alice", "correct horse", ""},
		{"alice", "twelve chars", ""},
		{"alice", "ünïcödé pass", ""}, // 12 characters, more bytes
		{"alice", "eleven char", "it has 11 characters, at least 12 are needed"},
		{"alice", "", "it has 0 characters"},
		{"alice.smith@example.com", "Alice.Smith@example.com", "it is the user's name"},
		{"alice", strings.Repeat("x", auth.MaxPasswordLength+1), "longer than 1024 bytes"},
	}
	for _, tt := range tests {
		err := auth.CheckPasswordPolicy(tt.name, tt.password)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("CheckPasswordPolicy(%s, %q) = %v, want nil", tt.name, tt.password, err)
		case tt.wantErr != "" && (!errors.Is(err, auth.ErrWeakPassword) || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("CheckPasswordPolicy(%s, %.20q) = %v, want ErrWeakPassword saying %q", tt.name, tt.password, err, tt.wantErr)
		}
	}
	if p := auth.GeneratePassword(); auth.CheckPasswordPolicy("alice", p) != nil || p == auth.GeneratePassword() {
		t.Errorf("GeneratePassword = %q: refused by the policy, or not random", p)
	}
}

func TestParamsValidated(t *testing.T) {
	for _, p := range []auth.Params{{Memory: 64}, {Memory: 64, Time: 1}, {Time: 1, Threads: 1}, {Memory: 4, Time: 1, Threads: 1}} {
		if _, err := auth.New(auth.Options{Params: p}); err == nil {
			t.Errorf("New with Params %+v = nil error, want one", p)
		}
	}
}
