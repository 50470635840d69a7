package aescbc_test

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"github.com/edihub/edihub/internal/aescbc"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// NIST SP 800-38A, F.2.1-F.2.6: the CBC example vectors.
func TestSP800_38A(t *testing.T) {
	iv := "000102030405060708090a0b0c0d0e0f"
	plain := "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51" +
		"30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710"
	for _, v := range []struct{ name, key, cipher string }{
		{"AES-128", "2b7e151628aed2a6abf7158809cf4f3c",
			"7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b2" +
				"73bed6b8e3c1743b7116e69e222295163ff1caa1681fac09120eca307586e1a7"},
		{"AES-192", "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b",
			"4f021db243bc633d7178183a9fa071e8b4d9ada9ad7dedf4e5e738763f69145a" +
				"571b242012fb7ae07fa9baac3df102e008b0e27988598881d920a9e64f5615cd"},
		{"AES-256", "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
			"f58c4c04d6e5f1ba779eabfb5f7bfbd69cfc4e967edb808d679f777bc6702c7d" +
				"39f23369a9d9bacfa530e26304231461b2eb05e2c39be9fcda6c19078c6a9d1b"},
	} {
		t.Run(v.name, func(t *testing.T) {
			dec, err := aescbc.NewDecrypter(unhex(t, v.key), unhex(t, iv))
			if err != nil {
				t.Fatal(err)
			}
			got := unhex(t, v.cipher)
			dec.CryptBlocks(got, got)
			if want := unhex(t, plain); !bytes.Equal(got, want) {
				t.Fatalf("decrypt:\n got %x\nwant %x", got, want)
			}
		})
	}
}

// stdModes is crypto/cipher's CBC pair for key and iv.
func stdModes(t testing.TB, key, iv []byte) (enc, dec cipher.BlockMode) {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	return cipher.NewCBCEncrypter(block, iv), cipher.NewCBCDecrypter(block, iv)
}

// crypt runs data through m in calls of the given block counts (the
// chain carried from call to call), in place or into a fresh buffer.
func crypt(m cipher.BlockMode, data []byte, calls []int, inPlace bool) []byte {
	out := make([]byte, len(data))
	src := data
	if inPlace {
		copy(out, data)
		src = out
	}
	off := 0
	for _, n := range calls {
		m.CryptBlocks(out[off:off+n*aes.BlockSize], src[off:off+n*aes.BlockSize])
		off += n * aes.BlockSize
	}
	return out
}

// splitBlocks cuts blocks into 1 to 4 calls at random.
func splitBlocks(r *rand.Rand, blocks int) []int {
	var calls []int
	for n := r.IntN(4) + 1; n > 1 && blocks > 0; n-- {
		c := r.IntN(blocks + 1)
		calls, blocks = append(calls, c), blocks-c
	}
	return append(calls, blocks)
}

// compare checks aescbc's decryption against crypto/cipher's for one
// key, IV, input and split into calls: crypto/cipher's ciphertext, made
// in one call, comes back as the plaintext, as crypto/cipher's
// decryption gives it.
func compare(t testing.TB, key, iv, plain []byte, calls []int, inPlace bool) {
	t.Helper()
	stdEnc, stdDec := stdModes(t, key, iv)
	dec, err := aescbc.NewDecrypter(key, iv)
	if err != nil {
		t.Fatal(err)
	}
	ciphertext := crypt(stdEnc, plain, []int{len(plain) / aes.BlockSize}, false)
	if got := crypt(stdDec, ciphertext, calls, false); !bytes.Equal(got, plain) {
		t.Fatal("crypto/cipher does not decrypt its own ciphertext")
	}
	if got := crypt(dec, ciphertext, calls, inPlace); !bytes.Equal(got, plain) {
		t.Fatalf("key %d bytes, %d blocks in %v, in place %v: plaintext not recovered", len(key), len(plain)/16, calls, inPlace)
	}
}

// Every key size, lengths around the eight-block step, split into
// calls at random, in place and not.
func TestMatchesCryptoCipher(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, keyLen := range []int{16, 24, 32} {
		for blocks := range 40 {
			for _, inPlace := range []bool{false, true} {
				key, iv, plain := make([]byte, keyLen), make([]byte, 16), make([]byte, blocks*16)
				for _, b := range [][]byte{key, iv, plain} {
					for i := range b {
						b[i] = byte(r.Uint32())
					}
				}
				compare(t, key, iv, plain, splitBlocks(r, blocks), inPlace)
			}
		}
		big := make([]byte, 64<<10+48)
		for i := range big {
			big[i] = byte(r.Uint32())
		}
		compare(t, big[:keyLen], big[32:48], big, []int{len(big) / 16}, true)
	}
}

func TestBadKeyOrIV(t *testing.T) {
	for _, c := range []struct {
		key, iv int
		want    string
	}{
		{15, 16, "aescbc: key of 15 bytes, want 16, 24 or 32"},
		{33, 16, "aescbc: key of 33 bytes, want 16, 24 or 32"},
		{16, 8, "aescbc: IV of 8 bytes, want 16"},
	} {
		if _, err := aescbc.NewDecrypter(make([]byte, c.key), make([]byte, c.iv)); err == nil || err.Error() != c.want {
			t.Errorf("NewDecrypter(key %d bytes, IV %d bytes) = %v, want %q", c.key, c.iv, err, c.want)
		}
	}
}

// The misuses crypto/cipher panics on panic here too.
func TestPanics(t *testing.T) {
	buf := make([]byte, 64)
	for name, f := range map[string]func(m cipher.BlockMode){
		"partial block":   func(m cipher.BlockMode) { m.CryptBlocks(buf[:20], buf[:20]) },
		"short output":    func(m cipher.BlockMode) { m.CryptBlocks(buf[:16], buf[:32]) },
		"inexact overlap": func(m cipher.BlockMode) { m.CryptBlocks(buf[16:48], buf[:32]) },
	} {
		m, err := aescbc.NewDecrypter(make([]byte, 16), make([]byte, 16))
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(m)
		}()
	}
}

func FuzzMatchesCryptoCipher(f *testing.F) {
	f.Add(uint8(0), []byte("0123456789abcdef0123456789abcdef0123456789abcdef"), uint16(0), false)
	f.Add(uint8(2), make([]byte, 300), uint16(7), true)
	f.Fuzz(func(t *testing.T, keySize uint8, data []byte, split uint16, inPlace bool) {
		keyLen := 16 + 8*int(keySize%3)
		if len(data) < keyLen+16 {
			return
		}
		key, iv, plain := data[:keyLen], data[keyLen:keyLen+16], data[keyLen+16:]
		plain = plain[:len(plain)&^15]
		blocks := len(plain) / 16
		first := int(split) % (blocks + 1)
		compare(t, key, iv, plain, []int{first, blocks - first}, inPlace)
	})
}

// BenchmarkCBC: aescbc's decryption against crypto/cipher's on 64 KiB
// calls (the speed-up is the ratio of the two rows' MB/s).
func BenchmarkCBC(b *testing.B) {
	key, iv := make([]byte, 32), make([]byte, 16)
	_, stdDec := stdModes(b, key, iv)
	dec, err := aescbc.NewDecrypter(key, iv)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for _, c := range []struct {
		name string
		m    cipher.BlockMode
	}{{"decrypt/crypto-cipher", stdDec}, {"decrypt/aescbc", dec}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				c.m.CryptBlocks(buf, buf)
			}
		})
	}
}
