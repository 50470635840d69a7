package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// Sending with AS2 restart (draft-harding-as2-restart) to a partner
// whose profile sets as2_restart: true. A message over restartFromBytes
// is posted with an ETag naming the transfer: the same on every attempt
// at the outbox row, so that a retry (on any replica) can resume it.
// A retry first asks HEAD with If-Match how much the partner holds and,
// when it holds part of the body, posts the rest with If-Match and
// Content-Range; a partner that holds nothing, or refuses the resume
// (412, 416), gets the whole body again in the same attempt.

// restartFromBytes is the body size from which messages are sent with
// restart: edihub as a receiver keeps transfers from its spool threshold
// (8 MiB by default) only.
const restartFromBytes = 8 << 20

// restartETag is the transfer ID of an outbox row: the same on every
// attempt, distinct between rows (a resend is a row of its own). For a
// message built again at every attempt it names the body's SHA-256 too:
// a rebuild that came out other than the bytes a partner holds part of
// is a transfer of its own, posted whole.
func restartETag(it postgres.OutboxItem) string {
	id := fmt.Appendf(nil, "%d\x00%s", it.ID, first(it.Headers, "Message-ID"))
	if it.BuildInputs != nil {
		id = append(append(id, 0), it.BodySHA256...)
	}
	sum := sha256.Sum256(id)
	return "edihub-" + hex.EncodeToString(sum[:16])
}

// post sends req, whose body is the size bytes of src (built in memory or
// into a spool file), with AS2 restart when p asks for it (see above), and
// reads the answer (exchange).
func (d *Dispatcher) post(ctx context.Context, client *http.Client, req *http.Request, it postgres.OutboxItem, p *config.Partner, src io.ReaderAt, size int64) (*http.Response, []byte, error) {
	if !kindOf(it).message || p == nil || !p.AS2RestartSend || p.Chunked || size <= restartFromBytes {
		return d.exchange(client, req, it)
	}
	etag := strconv.Quote(restartETag(it))
	req.Header.Set("ETag", etag)
	if it.Attempts <= 1 {
		return d.exchange(client, req, it)
	}
	from := d.restartOffset(ctx, client, req, etag, size)
	if from == 0 {
		return d.exchange(client, req, it)
	}
	rest := req.Clone(ctx)
	rest.Header.Del("ETag")
	rest.Header.Set("If-Match", etag)
	rest.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, size-1, size))
	rest.Body = io.NopCloser(io.NewSectionReader(src, from, size-from))
	rest.GetBody = nil
	rest.ContentLength = size - from
	resp, body, err := d.exchange(client, rest, it)
	if err == nil && (resp.StatusCode == http.StatusPreconditionFailed || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable) {
		// The partner lost or moved the transfer: the whole body again.
		return d.exchange(client, req, it)
	}
	return resp, body, err
}

// restartOffset asks the partner with HEAD how many bytes of transfer
// etag it holds: a number between 0 and size (exclusive) from a 200
// answer, else 0 (start over).
func (d *Dispatcher) restartOffset(ctx context.Context, client *http.Client, req *http.Request, etag string, size int64) int64 {
	head, err := http.NewRequestWithContext(ctx, http.MethodHead, req.URL.String(), nil)
	if err != nil {
		return 0
	}
	head.Header = req.Header.Clone()
	for _, k := range []string{"ETag", "Content-Type", "Content-Transfer-Encoding", "Content-Disposition", "Content-Length"} {
		head.Header.Del(k)
	}
	head.Header.Set("If-Match", etag)
	resp, err := client.Do(head)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength <= 0 || resp.ContentLength >= size {
		return 0
	}
	return resp.ContentLength
}
