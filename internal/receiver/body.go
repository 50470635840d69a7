package receiver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/spool"
)

// readBody reads the body within Options.ReadTimeout and then clears the
// deadline (it would otherwise cancel the request's context while the
// message is processed). After an error the connection is closed.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(h.o.ReadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, fmt.Errorf("set read deadline: %w", err)
	}
	body, err := readBody(r)
	if err != nil {
		// The deadline stays: net/http must not wait for the rest.
		w.Header().Set("Connection", "close")
		return nil, err
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// readBody reads the whole body once, in pieces of growing size (capped
// at what Content-Length says is left) joined once: a client claiming a
// large body gets memory only for what it sent, and a large body peaks at
// twice its size instead of the up to three times of a doubling buffer.
func readBody(r *http.Request) ([]byte, error) {
	left := int64(-1) // unknown: chunked
	if r.ContentLength > 0 {
		left = r.ContentLength
	}
	var pieces [][]byte
	total, size := 0, 32<<10
	for {
		if left >= 0 {
			size = int(min(int64(size), left))
		}
		buf := make([]byte, size)
		n, err := fill(r.Body, buf)
		pieces = append(pieces, buf[:n])
		total += n
		if left >= 0 {
			left -= int64(n)
			if left == 0 && (err == nil || err == io.EOF) {
				break
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(size*2, 4<<20)
	}
	if len(pieces) == 1 {
		return pieces[0], nil
	}
	out := make([]byte, 0, total)
	for _, p := range pieces {
		out = append(out, p...)
	}
	if total >= collectAfterJoin {
		// The pieces were live when out was allocated, so the collector
		// may have set its next goal at twice both (4× the body) and let
		// garbage fill that. Collecting now sets it from the body alone.
		pieces = nil
		runtime.GC()
	}
	return out, nil
}

// collectAfterJoin is the body size from which readBody collects
// garbage after joining the pieces: a blocking collection costs a few
// milliseconds, a body this large twice its size in heap headroom.
const collectAfterJoin = 32 << 20

// fill reads into buf until it is full (nil error) or the body ends
// (io.EOF, the only clean end; a truncated chunked body reports
// io.ErrUnexpectedEOF, which is passed on).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// isTimeout reports a body read that hit the read deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// bodyError answers a body that could not be read (or spooled) whole.
func (h *Handler) bodyError(w http.ResponseWriter, partnerLabel string, err error, reportMDN bool) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errBusy):
		h.busy(w, partnerLabel, "body")
	case errors.Is(err, spool.ErrFull):
		h.busy(w, partnerLabel, "spool")
	case errors.As(err, &mbe) && reportMDN && mbe.Limit == h.o.MaxMDNBytes:
		h.mdnTooLarge(w, partnerLabel, -1)
	case errors.As(err, &mbe):
		h.metrics.received.WithLabelValues(partnerLabel, resultTooLarge).Inc()
		h.log.Warn("request body over the limit", zap.String("partner", partnerLabel), zap.Int64("limit", mbe.Limit))
		http.Error(w, "request body too large: the limit is "+strconv.FormatInt(mbe.Limit, 10)+" bytes; send large files in smaller parts or ask the operator to raise EDIHUB_MAX_BODY_BYTES", http.StatusRequestEntityTooLarge)
	case isTimeout(err):
		h.metrics.received.WithLabelValues(partnerLabel, resultTimeout).Inc()
		h.log.Warn("request body not received in time", zap.String("partner", partnerLabel), zap.Duration("timeout", h.o.ReadTimeout))
		http.Error(w, "request body not received within "+h.o.ReadTimeout.String()+"; nothing was accepted, please resend", http.StatusRequestTimeout)
	default:
		h.metrics.received.WithLabelValues(partnerLabel, resultBadRequest).Inc()
		h.log.Warn("request body unreadable", zap.String("partner", partnerLabel), zap.Error(err))
		http.Error(w, "request body could not be read completely", http.StatusBadRequest)
	}
}
