//go:build !amd64 || purego || goexperiment.boringcrypto

package aescbc

import "crypto/cipher"

const useAsm = false

func newAsmDecrypter(key, iv []byte) cipher.BlockMode { panic("aescbc: no assembly") }
