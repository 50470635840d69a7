package cms

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		give string // hex
		want string // hex
	}{
		{"DER unchanged", "300702010104020102", "300702010104020102"},
		{"indefinite sequence", "3080020101" + "0000", "3003020101"},
		{"constructed octet string", "2480" + "0402abcd" + "0401ef" + "0000", "0403abcdef"},
		{"nested constructed octet string", "2480" + "2480" + "0401aa" + "0000" + "0401bb" + "0000", "0402aabb"},
		{"non-minimal length", "30820003020101", "3003020101"},
		{"implicit [0] kept constructed", "a080" + "0401aa" + "0401bb" + "0000", "a0060401aa0401bb"},
		{"trailing bytes dropped", "3003020101" + "0d0a", "3003020101"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, _ := hex.DecodeString(tt.give)
			got, err := normalize(in)
			if err != nil {
				t.Fatalf("normalize(%s) error = %v", tt.give, err)
			}
			if hex.EncodeToString(got) != tt.want {
				t.Errorf("normalize(%s) = %x, want %s", tt.give, got, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "30", "3080", "3005020101", "0480", "2480020101" + "0000", "1f"} {
		in, _ := hex.DecodeString(bad)
		if _, err := normalize(in); err == nil {
			t.Errorf("normalize(%s) error = nil", bad)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"3080020101" + "0000", "2480" + "0402abcd" + "0000", "30820003020101", "a080" + "0401aa" + "0000"} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		once, err := normalize(b)
		if err != nil {
			return
		}
		if len(once) > 2*len(b)+16 {
			t.Fatalf("normalize grew %d bytes to %d", len(b), len(once))
		}
		twice, err := normalize(once)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("normalize is not idempotent: %x -> %x -> %x (%v)", b, once, twice, err)
		}
	})
}

func TestNormalizeElementBound(t *testing.T) {
	// 200k empty NULLs in one indefinite SEQUENCE: small input, many nodes.
	in := append([]byte{0x30, 0x80}, bytes.Repeat([]byte{0x05, 0x00}, 200_000)...)
	in = append(in, 0, 0)
	if _, err := normalize(in); err == nil {
		t.Error("normalize(200k elements) error = nil, want a bound")
	}
}
