package cms

import (
	"encoding/asn1"
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
	// Most input is DER already: check that without building the tree.
	var check berParser
	if n, der, err := check.der(b, 0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	} else if der {
		return b[:n], nil
	}
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
	nodes   int
}

// maxBERNodes bounds the elements of one structure so that a small input of
// many tiny elements cannot make the tree large. Real CMS structures have a
// few thousand at most; OCTET STRING segments are not counted.
const maxBERNodes = 100_000

var errTruncated = errors.New("ber: truncated element")

// berHeader is a parsed identifier and length.
type berHeader struct {
	ident       []byte
	constructed bool
	indefinite  bool
	length      int // content length when definite
	size        int // bytes of identifier and length octets
}

func (p *berParser) header(b []byte) (berHeader, error) {
	if len(b) < 2 {
		return berHeader{}, errTruncated
	}
	i := 1
	if b[0]&0x1f == 0x1f {
		for {
			if i >= len(b) || i > 5 {
				return berHeader{}, errors.New("ber: bad tag")
			}
			i++
			if b[i-1]&0x80 == 0 {
				break
			}
		}
	}
	if i >= len(b) {
		return berHeader{}, errTruncated
	}
	h := berHeader{ident: b[:i], constructed: b[0]&0x20 != 0}
	l := int(b[i])
	i++
	switch {
	case l == 0x80:
		if !h.constructed {
			return berHeader{}, errors.New("ber: indefinite length on primitive")
		}
		h.indefinite = true
		p.changed = true
	case l > 0x80:
		k := l & 0x7f
		if k > 4 || i+k > len(b) {
			return berHeader{}, errors.New("ber: bad length")
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
	h.length, h.size = l, i
	if !h.indefinite && l > len(b)-i {
		return berHeader{}, errTruncated
	}
	return h, nil
}

// der reports whether the element at the start of b is in the form
// normalize produces (definite minimal lengths, no constructed OCTET
// STRING) and its encoded size, allocating nothing. It stops at the first
// element that is not; parse then takes over and checks the rest.
func (p *berParser) der(b []byte, depth int) (int, bool, error) {
	if depth > maxBERDepth {
		return 0, false, errors.New("ber: nesting too deep")
	}
	if p.nodes++; p.nodes > maxBERNodes {
		return 0, false, errors.New("ber: too many elements")
	}
	h, err := p.header(b)
	if err != nil {
		return 0, false, err
	}
	if p.changed || b[0] == 0x24 {
		return 0, false, nil
	}
	if h.constructed {
		for body := b[h.size : h.size+h.length]; len(body) > 0; {
			n, der, err := p.der(body, depth+1)
			if err != nil || !der {
				return 0, false, err
			}
			body = body[n:]
		}
	}
	return h.size + h.length, true, nil
}

func (p *berParser) parse(b []byte, depth int) (*berNode, []byte, error) {
	if depth > maxBERDepth {
		return nil, nil, errors.New("ber: nesting too deep")
	}
	if p.nodes++; p.nodes > maxBERNodes {
		return nil, nil, errors.New("ber: too many elements")
	}
	h, err := p.header(b)
	if err != nil {
		return nil, nil, err
	}
	rest := b[h.size:]
	if b[0] == 0x24 { // constructed OCTET STRING: flatten without a subtree
		p.changed = true
		flat, r, err := p.segments(h, rest, nil, depth)
		if err != nil {
			return nil, nil, err
		}
		if flat == nil {
			flat = []byte{}
		}
		return &berNode{ident: []byte{0x04}, content: flat}, r, nil
	}
	n := &berNode{ident: h.ident}
	if !h.constructed {
		n.content = rest[:h.length]
		return n, rest[h.length:], nil
	}
	var body []byte
	if h.indefinite {
		body = rest
	} else {
		body, rest = rest[:h.length], rest[h.length:]
	}
	for {
		if h.indefinite {
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
	return n, rest, nil
}

// segments appends the content of the OCTET STRING segments of a
// constructed string (h, body after its header) to dst and returns the
// bytes after the string.
func (p *berParser) segments(h berHeader, body []byte, dst []byte, depth int) ([]byte, []byte, error) {
	if depth > maxBERDepth {
		return nil, nil, errors.New("ber: nesting too deep")
	}
	var rest []byte
	if !h.indefinite {
		body, rest = body[:h.length], body[h.length:]
	}
	for {
		if h.indefinite {
			if len(body) >= 2 && body[0] == 0 && body[1] == 0 {
				return dst, body[2:], nil
			}
		} else if len(body) == 0 {
			return dst, rest, nil
		}
		sh, err := p.header(body)
		if err != nil {
			return nil, nil, err
		}
		switch body[0] {
		case 0x04:
			dst = append(dst, body[sh.size:sh.size+sh.length]...)
			body = body[sh.size+sh.length:]
		case 0x24:
			if dst, body, err = p.segments(sh, body[sh.size:], dst, depth+1); err != nil {
				return nil, nil, err
			}
		default:
			return nil, nil, errors.New("ber: constructed OCTET STRING holds another type")
		}
	}
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
	tagContext2    = 0xa2 // [2] constructed
	tagContext0Pri = 0x80 // [0] primitive
)

// berElement is one BER element located in its input, nothing copied.
type berElement struct {
	tag     byte   // first identifier octet
	full    []byte // identifier, length, content and end-of-contents octets
	content []byte // content octets, end-of-contents octets excluded
}

// next splits the element at the start of b from the bytes after it. The
// end of an indefinite-length element is found by walking its children;
// definite lengths are skipped, so the walk costs no more than the
// elements of indefinite length hold.
func (p *berParser) next(b []byte, depth int) (berElement, []byte, error) {
	if depth > maxBERDepth {
		return berElement{}, nil, errors.New("ber: nesting too deep")
	}
	h, err := p.header(b)
	if err != nil {
		return berElement{}, nil, err
	}
	if !h.indefinite {
		end := h.size + h.length
		return berElement{tag: b[0], full: b[:end], content: b[h.size:end]}, b[end:], nil
	}
	body := b[h.size:]
	for len(body) < 2 || body[0] != 0 || body[1] != 0 {
		if _, body, err = p.next(body, depth+1); err != nil {
			return berElement{}, nil, err
		}
	}
	n := len(b) - h.size - len(body)
	return berElement{tag: b[0], full: b[:h.size+n+2], content: b[h.size : h.size+n]}, body[2:], nil
}

// children returns the elements of a constructed element's content.
func (p *berParser) children(e berElement, depth int) ([]berElement, error) {
	var out []berElement
	for c := e.content; len(c) > 0; {
		k, rest, err := p.next(c, depth+1)
		if err != nil {
			return nil, err
		}
		out, c = append(out, k), rest
	}
	return out, nil
}

// walkSegments calls fn with the content of each primitive OCTET STRING
// segment of a constructed string's content c, in order.
func (p *berParser) walkSegments(c []byte, depth int, fn func([]byte)) error {
	for len(c) > 0 {
		s, rest, err := p.next(c, depth+1)
		if err != nil {
			return err
		}
		switch s.tag {
		case tagOctetString:
			fn(s.content)
		case tagOctetString | 0x20:
			if err := p.walkSegments(s.content, depth+1, fn); err != nil {
				return err
			}
		default:
			return errors.New("ber: constructed OCTET STRING holds another type")
		}
		c = rest
	}
	return nil
}

// gather returns the value of a string encoded as constructed segments in
// one buffer of exactly its size plus spare capacity.
func (p *berParser) gather(e berElement, spare int) ([]byte, error) {
	n := 0
	if err := p.walkSegments(e.content, 0, func(s []byte) { n += len(s) }); err != nil {
		return nil, err
	}
	out := make([]byte, 0, n+spare)
	if err := p.walkSegments(e.content, 0, func(s []byte) { out = append(out, s...) }); err != nil {
		return nil, err
	}
	return out, nil
}

// unmarshal normalises a (small) element and decodes it into v.
func (e berElement) unmarshal(v any, params string) error {
	der, err := normalize(e.full)
	if err != nil {
		return err
	}
	if _, err := asn1.UnmarshalWithParams(der, v, params); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}
