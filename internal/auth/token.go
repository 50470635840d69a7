package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TokenPrefix starts every API token edihub makes, so that one is
// recognised in a file, a log or a secret scanner.
const TokenPrefix = "edh_"

// tokenLen is the length of a token: the prefix and 32 random bytes in
// unpadded base64url.
var tokenLen = len(TokenPrefix) + base64.RawURLEncoding.EncodedLen(32)

// NewToken returns a new API token: "edh_" and 32 random bytes in
// base64url. Only its HashToken is stored; the token is shown once.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// HashToken is what is stored of a token: its SHA-256. A token carries 256
// random bits, so a fast hash suffices (no salt, no stretching): it cannot
// be guessed, only stolen, and the hash alone is of no use to a thief.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// looksLikeToken reports whether s has the form of a token NewToken
// makes: anything else is not looked up.
func looksLikeToken(s string) bool {
	if len(s) != tokenLen || !strings.HasPrefix(s, TokenPrefix) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s[len(TokenPrefix):])
	return err == nil
}

// ParseLifetime reads a token's lifetime: a number of days ("90d") or a
// Go duration ("36h", "90m"). It must be positive.
func ParseLifetime(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		if err == nil && n > 0 && n <= 100*366 {
			d = time.Duration(n) * 24 * time.Hour
		} else if err == nil {
			err = errors.New("out of range")
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: %q: want a number of days like 90d, or a duration like 36h", ErrBadExpiry, s)
	}
	return d, nil
}
