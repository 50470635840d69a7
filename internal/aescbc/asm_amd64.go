//go:build amd64 && !purego && !goexperiment.boringcrypto

package aescbc

import (
	"crypto/aes"
	"crypto/fips140"
	"encoding/binary"
	"math/bits"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useAsm: the assembly needs AES-NI; FIPS 140-3 mode keeps AES within
// Go's validated module.
var useAsm = cpu.X86.HasAES && cpu.X86.HasSSE2 && !fips140.Enabled()

// asmMode is CBC decryption over the equivalent inverse cipher's
// expanded key (FIPS-197 5.3.5): the encryption schedule's round keys in
// reverse order, the middle ones through InvMixColumns, as AESDEC takes
// them.
type asmMode struct {
	nr int // rounds: 10, 12 or 14
	xk [15 * aes.BlockSize]byte
	iv [aes.BlockSize]byte
}

func newAsmDecrypter(key, iv []byte) *asmMode {
	m := &asmMode{nr: len(key)/4 + 6}
	copy(m.iv[:], iv)
	var ek [15 * aes.BlockSize]byte
	n := m.nr * aes.BlockSize
	expandKey(key, ek[:n+aes.BlockSize])
	copy(m.xk[:aes.BlockSize], ek[n:])
	for r := 1; r < m.nr; r++ {
		invMixColumns(&m.xk[r*aes.BlockSize], &ek[n-r*aes.BlockSize])
	}
	copy(m.xk[n:n+aes.BlockSize], ek[:aes.BlockSize])
	return m
}

func (m *asmMode) BlockSize() int { return aes.BlockSize }

// CryptBlocks decrypts src, whole blocks, into dst, which is src
// or does not overlap it (crypto/cipher's rules, with its panics).
func (m *asmMode) CryptBlocks(dst, src []byte) {
	if len(src)%aes.BlockSize != 0 {
		panic("crypto/cipher: input not full blocks")
	}
	if len(dst) < len(src) {
		panic("crypto/cipher: output smaller than input")
	}
	if inexactOverlap(dst[:len(src)], src) {
		panic("crypto/cipher: invalid buffer overlap")
	}
	if len(src) == 0 {
		return
	}
	decryptCBC(m.nr, &m.xk[0], &m.iv[0], &dst[0], &src[0], len(src))
}

// inexactOverlap reports whether x and y share memory at any
// non-corresponding index (crypto/internal/alias).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs <= ys+uintptr(len(y)-1) && ys <= xs+uintptr(len(x)-1)
}

// expandKey writes key's encryption schedule to xk, (nr+1) round keys
// (FIPS-197 5.2): word i is column i, its bytes in memory order.
// SubWord is AESKEYGENASSIST's, not a table indexed by key bytes.
func expandKey(key, xk []byte) {
	nk := len(key) / 4
	var ws [60]uint32
	w := ws[:len(xk)/4]
	for i := range nk {
		w[i] = binary.BigEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := nk; i < len(w); i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			t = subWord(bits.RotateLeft32(t, 8)) ^ rcon<<24
			rcon <<= 1
			if rcon&0x100 != 0 {
				rcon ^= 0x11b
			}
		case nk > 6 && i%nk == 4:
			t = subWord(t)
		}
		w[i] = w[i-nk] ^ t
	}
	for i, v := range w {
		binary.BigEndian.PutUint32(xk[4*i:], v)
	}
}

// The assembly (asm_amd64.s).

// subWord applies the AES S-box to each byte of w.
//
//go:noescape
func subWord(w uint32) uint32

// invMixColumns writes InvMixColumns of the 16 bytes at src to dst.
//
//go:noescape
func invMixColumns(dst, src *byte)

// decryptCBC decrypts n bytes (whole blocks, n > 0) from src to dst
// under the nr-round inverse schedule xk, chained from the block at iv,
// and leaves the last ciphertext block at iv; dst may be src.
//
//go:noescape
func decryptCBC(nr int, xk, iv, dst, src *byte, n int)
