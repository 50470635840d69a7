//go:build amd64 && !purego && !goexperiment.boringcrypto

package aescbc

import (
	"crypto/fips140"
	"testing"

	"golang.org/x/sys/cpu"
)

// On a CPU with AES-NI the assembly is what the package tests measure
// (outside FIPS 140-3 mode), not crypto/cipher compared with itself.
func TestAssemblyInUse(t *testing.T) {
	if !cpu.X86.HasAES || fips140.Enabled() {
		t.Skip("no AES-NI, or FIPS 140-3 mode: crypto/cipher is used")
	}
	if !useAsm {
		t.Fatal("AES-NI present but useAsm is false")
	}
	m, err := NewDecrypter(make([]byte, 16), make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*asmMode); !ok {
		t.Fatalf("NewDecrypter gave %T, want *asmMode", m)
	}
}

// subWord is the S-box on each byte (FIPS-197 5.1.1's table, spot
// checks), whatever the byte's position.
func TestSubWord(t *testing.T) {
	if got := subWord(0x00010253); got != 0x637c77ed {
		t.Fatalf("subWord(0x00010253) = %#x, want 0x637c77ed", got)
	}
	if got := subWord(0xffc9538a); got != 0x16dded7e {
		t.Fatalf("subWord(0xffc9538a) = %#x, want 0x16dded7e", got)
	}
}
