package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id's cost parameters. Every hash carries those it was
// made with (the PHC string), so they can be raised later: old hashes are
// still checked with theirs and rehashed at the next login.
type Params struct {
	// Memory in KiB.
	Memory uint32
	// Time is the number of passes.
	Time uint32
	// Threads is the parallelism.
	Threads uint8
}

// DefaultParams are OWASP's minimum for argon2id: 19 MiB, 2 passes, one
// thread (about 40 ms on one core of a small server).
var DefaultParams = Params{Memory: 19456, Time: 2, Threads: 1}

// Lengths of a hash's parts, in bytes.
const (
	saltLen = 16
	keyLen  = 32
)

// Bounds of the parameters read from a stored hash, so that a hash
// written with absurd ones cannot stall a login.
const (
	maxMemory  = 1 << 20 // 1 GiB
	maxTime    = 64
	maxKeyLen  = 128
	minKeyLen  = 16
	minSaltLen = 8
)

// Password policy.
const (
	// MinPasswordLength is the fewest characters a password may have.
	MinPasswordLength = 12
	// MaxPasswordLength bounds a password, in bytes.
	MaxPasswordLength = 1024
)

var errMalformedHash = errors.New("malformed password hash")

var b64 = base64.RawStdEncoding

func (p Params) validate() error {
	if p.Memory < 8*uint32(p.Threads) || p.Memory > maxMemory || p.Time == 0 || p.Time > maxTime || p.Threads == 0 {
		return fmt.Errorf("auth: argon2id parameters m=%d,t=%d,p=%d: want m from 8×p to %d KiB, t from 1 to %d, p at least 1", p.Memory, p.Time, p.Threads, maxMemory, maxTime)
	}
	return nil
}

// HashPassword hashes password with DefaultParams and a random salt, as a
// PHC string: $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>.
func HashPassword(password string) string { return DefaultParams.Hash(password) }

// Hash hashes password with p and a random salt, as a PHC string.
func (p Params) Hash(password string) string {
	salt := make([]byte, saltLen)
	_, _ = rand.Read(salt) // never fails (crypto/rand)
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, keyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		b64.EncodeToString(salt), b64.EncodeToString(key))
}

// phc is a parsed hash.
type phc struct {
	p         Params
	salt, key []byte
}

func parseHash(hash string) (phc, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" || parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return phc{}, errMalformedHash
	}
	var h phc
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return phc{}, errMalformedHash
		}
		switch k {
		case "m":
			h.p.Memory = uint32(n)
		case "t":
			h.p.Time = uint32(n)
		case "p":
			if n > 255 {
				return phc{}, errMalformedHash
			}
			h.p.Threads = uint8(n)
		default:
			return phc{}, errMalformedHash
		}
	}
	var err error
	if h.salt, err = b64.DecodeString(parts[4]); err != nil {
		return phc{}, errMalformedHash
	}
	if h.key, err = b64.DecodeString(parts[5]); err != nil {
		return phc{}, errMalformedHash
	}
	if h.p.Memory == 0 || h.p.Memory > maxMemory || h.p.Time == 0 || h.p.Time > maxTime || h.p.Threads == 0 ||
		len(h.salt) < minSaltLen || len(h.key) < minKeyLen || len(h.key) > maxKeyLen {
		return phc{}, errMalformedHash
	}
	return h, nil
}

// CheckPassword reports whether password matches hash, comparing the
// derived keys in constant time. A malformed hash is an error.
func CheckPassword(hash, password string) (bool, error) {
	h, err := parseHash(hash)
	if err != nil {
		return false, err
	}
	key := argon2.IDKey([]byte(password), h.salt, h.p.Time, h.p.Memory, h.p.Threads, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(key, h.key) == 1, nil
}

// NeedsRehash reports whether hash was made with parameters below p (or
// cannot be read), so that the next login should store a new one.
func NeedsRehash(hash string, p Params) bool {
	h, err := parseHash(hash)
	return err != nil || h.p.Memory < p.Memory || h.p.Time < p.Time || h.p.Threads < p.Threads || len(h.key) < keyLen
}

// CheckPasswordPolicy returns an error wrapping ErrWeakPassword, saying
// what to do, for a password the policy refuses: fewer than
// MinPasswordLength characters, more than MaxPasswordLength bytes, or the
// user's name.
func CheckPasswordPolicy(name, password string) error {
	if n := utf8.RuneCountInString(password); n < MinPasswordLength {
		return fmt.Errorf("%w: it has %d characters, at least %d are needed: use a passphrase of a few words, or have edihub generate one", ErrWeakPassword, n, MinPasswordLength)
	}
	if len(password) > MaxPasswordLength {
		return fmt.Errorf("%w: it is longer than %d bytes", ErrWeakPassword, MaxPasswordLength)
	}
	if strings.EqualFold(strings.TrimSpace(password), name) {
		return fmt.Errorf("%w: it is the user's name: choose another", ErrWeakPassword)
	}
	return nil
}

// GeneratePassword returns a random password of 26 characters (128 bits,
// base32), for a user created without one.
func GeneratePassword() string { return rand.Text() }
