// Package aescbc is AES-CBC decryption as a cipher.BlockMode, for the
// CMS enveloped content AS2 partners send (AES-128/192/256-CBC is what
// most of them use).
//
// Go's crypto/cipher decrypts CBC on amd64 a block at a time through two
// function calls (one block's assembly and an XOR), about 0.85 GB/s on a
// 2-core AMD EPYC where openssl does 7.7 GB/s. Here the whole chain is
// one assembly loop with AES-NI that decrypts eight blocks at a time,
// whose rounds overlap: CBC decryption's blocks are independent. It is
// used where the CPU has AES-NI and Go's FIPS 140-3 mode is off;
// otherwise, on other architectures, with the purego tag and in the
// BoringCrypto build, it is crypto/aes with crypto/cipher's CBC.
//
// Encryption is crypto/cipher.NewCBCEncrypter's: each block needs the
// one before, so any loop runs at the AESENC instruction's latency, and
// one in assembly measured only 1.2 to 1.4 times crypto/cipher's speed,
// too little beside a send's signature and digests to keep a second
// assembly loop for.
package aescbc

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
)

// NewDecrypter returns AES-CBC decryption under key (16, 24 or 32 bytes)
// starting from iv (16 bytes): crypto/cipher.NewCBCDecrypter's mode, the
// same bytes out, the same panics on misuse.
func NewDecrypter(key, iv []byte) (cipher.BlockMode, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("aescbc: key of %d bytes, want 16, 24 or 32", len(key))
	}
	if len(iv) != aes.BlockSize {
		return nil, fmt.Errorf("aescbc: IV of %d bytes, want %d", len(iv), aes.BlockSize)
	}
	if useAsm {
		return newAsmDecrypter(key, iv), nil
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("aescbc: %w", err)
	}
	return cipher.NewCBCDecrypter(block, iv), nil
}
