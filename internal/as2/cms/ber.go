package cms

import (
	"errors"
	"fmt"
)

// maxBERDepth bounds nesting while normalising; CMS structures used by AS2
// nest well under 20 levels.
const maxBERDepth = 64

// berNode is one parsed BER element.
type berNode struct {
	ident    []byte // identifier octets as received, constructed bit adjusted
	content  []byte // primitive content (nil when constructed)
	children []*berNode
	length   int // encoded content length, filled by size
}

// normalize converts a BER encoding of one element into the same element
// with definite, minimal lengths and with constructed universal OCTET
// STRINGs flattened to primitive ones, which is what encoding/asn1 accepts.
// It returns the input unchanged (not copied) when it is already in that
// form. Bytes after the first element are ignored: partners append CRLF or
// padding after the DER now and then.
func normalize(b []byte) ([]byte, error) {
	p := berParser{}
	n, rest, err := p.parse(b, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if !p.changed {
		return b[:len(b)-len(rest)], nil
	}
	out := make([]byte, 0, n.size())
	return n.encode(out), nil
}

type berParser struct {
	changed bool
}

var errTruncated = errors.New("ber: truncated element")

func (p *berParser) parse(b []byte, depth int) (*berNode, []byte, error) {
	if depth > maxBERDepth {
		return nil, nil, errors.New("ber: nesting too deep")
	}
	if len(b) < 2 {
		return nil, nil, errTruncated
	}
	i := 1
	if b[0]&0x1f == 0x1f {
		for {
			if i >= len(b) || i > 5 {
				return nil, nil, errors.New("ber: bad tag")
			}
			i++
			if b[i-1]&0x80 == 0 {
				break
			}
		}
	}
	if i >= len(b) {
		return nil, nil, errTruncated
	}
	n := &berNode{ident: b[:i]}
	constructed := b[0]&0x20 != 0
	l := int(b[i])
	i++
	indefinite := false
	switch {
	case l == 0x80:
		if !constructed {
			return nil, nil, errors.New("ber: indefinite length on primitive")
		}
		indefinite = true
		p.changed = true
	case l > 0x80:
		k := l & 0x7f
		if k > 4 || i+k > len(b) {
			return nil, nil, errors.New("ber: bad length")
		}
		l = 0
		for j := 0; j < k; j++ {
			l = l<<8 | int(b[i+j])
		}
		if l < 0x80 || (k > 1 && b[i] == 0) {
			p.changed = true // non-minimal length
		}
		i += k
	}
	rest := b[i:]
	if !indefinite && l > len(rest) {
		return nil, nil, errTruncated
	}
	if !constructed {
		n.content = rest[:l]
		return n, rest[l:], nil
	}
	var body []byte
	if indefinite {
		body = rest
	} else {
		body = rest[:l]
		rest = rest[l:]
	}
	for {
		if indefinite {
			if len(body) >= 2 && body[0] == 0 && body[1] == 0 {
				rest = body[2:]
				break
			}
		} else if len(body) == 0 {
			break
		}
		c, r, err := p.parse(body, depth+1)
		if err != nil {
			return nil, nil, err
		}
		n.children = append(n.children, c)
		body = r
	}
	if b[0] == 0x24 { // constructed OCTET STRING: flatten
		p.changed = true
		var flat []byte
		var err error
		if flat, err = flattenOctets(n, nil); err != nil {
			return nil, nil, err
		}
		return &berNode{ident: []byte{0x04}, content: flat}, rest, nil
	}
	return n, rest, nil
}

// flattenOctets concatenates the segments of a constructed string.
func flattenOctets(n *berNode, dst []byte) ([]byte, error) {
	if n.children == nil {
		return append(dst, n.content...), nil
	}
	for _, c := range n.children {
		if c.ident[0]&0x1f != 0x04 {
			return nil, errors.New("ber: constructed OCTET STRING holds another type")
		}
		var err error
		if dst, err = flattenOctets(c, dst); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// size fills in content lengths and returns the encoded size of n.
func (n *berNode) size() int {
	if n.content != nil || n.children == nil {
		n.length = len(n.content)
	} else {
		n.length = 0
		for _, c := range n.children {
			n.length += c.size()
		}
	}
	return len(n.ident) + lengthSize(n.length) + n.length
}

func (n *berNode) encode(dst []byte) []byte {
	dst = append(dst, n.ident...)
	dst = appendLength(dst, n.length)
	if n.children == nil {
		return append(dst, n.content...)
	}
	for _, c := range n.children {
		dst = c.encode(dst)
	}
	return dst
}

func lengthSize(l int) int {
	if l < 0x80 {
		return 1
	}
	s := 1
	for ; l > 0; l >>= 8 {
		s++
	}
	return s
}

func appendLength(dst []byte, l int) []byte {
	if l < 0x80 {
		return append(dst, byte(l))
	}
	k := lengthSize(l) - 1
	dst = append(dst, 0x80|byte(k))
	for j := k - 1; j >= 0; j-- {
		dst = append(dst, byte(l>>(8*j)))
	}
	return dst
}

// tlv encodes one DER element with the given identifier octet.
func tlv(tag byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, 1+lengthSize(n)+n)
	out = append(out, tag)
	out = appendLength(out, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// DER identifier octets used when building structures.
const (
	tagInteger     = 0x02
	tagOctetString = 0x04
	tagNull        = 0x05
	tagSequence    = 0x30
	tagSet         = 0x31
	tagContext0    = 0xa0 // [0] constructed
	tagContext1    = 0xa1 // [1] constructed
	tagContext0Pri = 0x80 // [0] primitive
)
