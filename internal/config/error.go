package config

import (
	"strconv"
	"strings"
)

// Error is the one error type Load and Parse return. It names the
// configuration file, the field as a YAML path (for example
// "partners[1].certificate"; empty when the problem concerns the whole file),
// the line when YAML knows it (0 otherwise), what is wrong and how to fix it.
//
// Msg and Fix never contain key material. Err holds the underlying error when
// there is one, so errors.Is(err, fs.ErrNotExist) and the like work.
type Error struct {
	File  string
	Field string
	Line  int
	Msg   string
	Fix   string
	Err   error
}

// Error formats the error on one line:
//
//	edihub.yaml:7: partners[1].certificate: open acme.crt: no such file or directory (fix: ...)
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Fix != "" {
		b.WriteString(" (fix: ")
		b.WriteString(e.Fix)
		b.WriteByte(')')
	}
	return b.String()
}

// Unwrap returns the underlying error, or nil.
func (e *Error) Unwrap() error { return e.Err }
