//go:build !amd64 || purego || goexperiment.boringcrypto

package aescbc

import "crypto/cipher"

const useAsm = false

func newAsmMode(key, iv []byte, encrypt bool) cipher.BlockMode { panic("aescbc: no assembly") }
