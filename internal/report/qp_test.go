package report_test

import (
	"bytes"
	"io"
	"mime/quotedprintable"
)

func qpReader(b []byte) io.Reader { return quotedprintable.NewReader(bytes.NewReader(b)) }
