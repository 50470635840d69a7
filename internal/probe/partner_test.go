package probe_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// Identities of the tests (openssltest.Keys): the partner is A (it
// decrypts and signs its MDNs with A's key), the station is B (it signs
// our messages), C is a stranger.
const (
	stationID = "EDIHUB TEST"
	partnerID = "ACME TEST"
)

// received is what the openssl partner found in the request it got.
type received struct {
	header http.Header
	// layers are the S/MIME layers openssl took off, outermost first.
	layers []string
	// mic is openssl's digest, base64, of what the MIC covers: the signed
	// part, or the decrypted entity of an unsigned message.
	mic     string
	payload []byte
}

// mdnAnswer is how the openssl partner answers a message it could take
// apart.
type mdnAnswer struct {
	// signer signs the MDN; nil answers unsigned.
	signer *openssltest.Identity
	// disposition is the Disposition field; "" means processed.
	disposition string
	// mic changes the Received-content-MIC the partner computed; nil
	// returns it as computed, and a negative disposition returns none.
	mic func(string) string
	// messageID, when set, replaces the Original-Message-ID.
	messageID string
}

// as2Partner is a trading partner built from openssl: it decrypts the
// request with its key, verifies our signature against the station
// certificate, digests what the MIC covers, and answers with a
// synchronous MDN that `openssl cms -sign` signs. Its handler records
// what it received; problems are test errors (never Fatal: it runs on
// the server's goroutine) answered with HTTP 500.
type as2Partner struct {
	t      *testing.T
	keys   *openssltest.Identities
	dir    string
	answer mdnAnswer
	seq    atomic.Int64

	mu   sync.Mutex
	reqs []received
}

func newAS2Partner(t *testing.T, answer mdnAnswer) *as2Partner {
	t.Helper()
	return &as2Partner{t: t, keys: openssltest.Keys(t), dir: t.TempDir(), answer: answer}
}

func (pt *as2Partner) received() []received {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return append([]received(nil), pt.reqs...)
}

func (pt *as2Partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	rec, err := pt.unpack(r.Header, body)
	if err != nil {
		pt.t.Errorf("openssl partner: %v", err)
		http.Error(w, "cannot unpack", http.StatusInternalServerError)
		return
	}
	pt.mu.Lock()
	pt.reqs = append(pt.reqs, rec)
	pt.mu.Unlock()
	// Like a real partner, it answers as the request asks: no MDN on the
	// connection when none or an asynchronous one is asked for, an
	// unsigned one unless a signed one is.
	if _, async := r.Header["Receipt-Delivery-Option"]; async || r.Header.Get("Disposition-Notification-To") == "" {
		return
	}
	signed := strings.Contains(r.Header.Get("Disposition-Notification-Options"), "pkcs7-signature")
	h, mdnBody, err := pt.mdn(r.Header.Get("Message-ID"), rec.mic, signed)
	if err != nil {
		pt.t.Errorf("openssl partner MDN: %v", err)
		http.Error(w, "cannot answer", http.StatusInternalServerError)
		return
	}
	for k, v := range h {
		w.Header()[k] = v
	}
	_, _ = w.Write(mdnBody)
}

// file writes b into a fresh file of the partner's directory.
func (pt *as2Partner) file(b []byte) (string, error) {
	p := filepath.Join(pt.dir, fmt.Sprintf("f%d", pt.seq.Add(1)))
	return p, os.WriteFile(p, b, 0o600)
}

// unpack takes the request apart with openssl, layer by layer.
func (pt *as2Partner) unpack(h http.Header, body []byte) (received, error) {
	rec := received{header: h.Clone()}
	if cte := h.Get("Content-Transfer-Encoding"); cte != "" && !strings.EqualFold(cte, "binary") {
		return rec, fmt.Errorf("the test partner reads binary bodies only, got %q", cte)
	}
	ct, ent := h.Get("Content-Type"), body
	for range 4 {
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil {
			return rec, fmt.Errorf("Content-Type %q: %w", ct, err)
		}
		switch {
		case mt == "application/pkcs7-mime" && strings.EqualFold(params["smime-type"], "enveloped-data"):
			rec.layers = append(rec.layers, "encrypted")
			in, err := pt.file(ent)
			if err != nil {
				return rec, err
			}
			plain, err := openssltest.TryRun(nil, "cms", "-decrypt", "-inform", "DER", "-in", in,
				"-recip", pt.keys.A.CertPath, "-inkey", pt.keys.A.KeyPath, "-binary")
			if err != nil {
				return rec, fmt.Errorf("decrypt: %w", err)
			}
			if rec.mic, err = pt.digest(plain); err != nil {
				return rec, err
			}
			if ct, ent, err = splitEntity(plain); err != nil {
				return rec, err
			}
		case mt == "application/pkcs7-mime" && strings.EqualFold(params["smime-type"], "compressed-data"):
			// This openssl has no zlib: openssl checks the structure, the
			// cms package inflates.
			rec.layers = append(rec.layers, "compressed")
			in, err := pt.file(ent)
			if err != nil {
				return rec, err
			}
			out, err := openssltest.TryRun(nil, "cms", "-cmsout", "-print", "-inform", "DER", "-in", in)
			if err != nil || !bytes.Contains(out, []byte("id-smime-ct-compressedData")) {
				return rec, fmt.Errorf("openssl does not see CompressedData: %v", err)
			}
			plain, err := cms.Decompress(ent, 1<<20)
			if err != nil {
				return rec, err
			}
			if ct, ent, err = splitEntity(plain); err != nil {
				return rec, err
			}
		case mt == "multipart/signed":
			rec.layers = append(rec.layers, "signed")
			part1, sig, err := splitSigned(ent, params["boundary"])
			if err != nil {
				return rec, err
			}
			content, err := pt.file(part1)
			if err != nil {
				return rec, err
			}
			sigFile, err := pt.file(sig)
			if err != nil {
				return rec, err
			}
			if _, err := openssltest.TryRun(nil, "cms", "-verify", "-inform", "DER", "-in", sigFile, "-content", content, "-binary",
				"-CAfile", pt.keys.B.CertPath, "-purpose", "any", "-out", os.DevNull); err != nil {
				return rec, fmt.Errorf("verify our signature: %w", err)
			}
			if rec.mic, err = pt.digest(part1); err != nil {
				return rec, err
			}
			if ct, ent, err = splitEntity(part1); err != nil {
				return rec, err
			}
		default:
			rec.payload = ent
			return rec, nil
		}
	}
	return rec, errors.New("too many layers")
}

// digest is openssl's SHA-256 of b in base64.
func (pt *as2Partner) digest(b []byte) (string, error) {
	in, err := pt.file(b)
	if err != nil {
		return "", err
	}
	d, err := openssltest.TryRun(nil, "dgst", "-sha256", "-binary", in)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(d), nil
}

// mdn builds the answer to messageID: a multipart/report, signed by
// openssl when signed is asked for and the answer has a signer.
func (pt *as2Partner) mdn(messageID, mic string, signed bool) (http.Header, []byte, error) {
	a := pt.answer
	disp := a.disposition
	if disp == "" {
		disp = "processed"
	} else {
		mic = ""
	}
	if mic != "" {
		mic += ", sha-256"
	}
	if a.mic != nil {
		mic = a.mic(mic)
	}
	if a.messageID != "" {
		messageID = a.messageID
	}
	const boundary = "report-boundary-1"
	reportType := `multipart/report; report-type=disposition-notification; boundary="` + boundary + `"`
	var b strings.Builder
	b.WriteString("--" + boundary + "\r\nContent-Type: text/plain\r\n\r\nMDN from the openssl test partner.\r\n")
	b.WriteString("--" + boundary + "\r\nContent-Type: message/disposition-notification\r\n\r\n")
	b.WriteString("Reporting-UA: openssl test partner\r\n")
	b.WriteString("Original-Recipient: rfc822; " + partnerID + "\r\nFinal-Recipient: rfc822; " + partnerID + "\r\n")
	b.WriteString("Original-Message-ID: " + messageID + "\r\n")
	b.WriteString("Disposition: automatic-action/MDN-sent-automatically; " + disp + "\r\n")
	if mic != "" {
		b.WriteString("Received-content-MIC: " + mic + "\r\n")
	}
	b.WriteString("\r\n--" + boundary + "--\r\n")
	if a.signer == nil || !signed {
		return http.Header{"Content-Type": {reportType}}, []byte(b.String()), nil
	}
	in, err := pt.file([]byte("Content-Type: " + reportType + "\r\n\r\n" + b.String()))
	if err != nil {
		return nil, nil, err
	}
	out, err := openssltest.TryRun(nil, "cms", "-sign", "-in", in, "-signer", a.signer.CertPath, "-inkey", a.signer.KeyPath, "-md", "sha256", "-crlfeol")
	if err != nil {
		return nil, nil, fmt.Errorf("sign MDN: %w", err)
	}
	// openssl writes an S/MIME entity: its header fields travel as HTTP
	// fields, the rest is the body.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(out)))
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, nil, fmt.Errorf("openssl output header: %w", err)
	}
	i := bytes.Index(out, []byte("\r\n\r\n"))
	if i < 0 {
		return nil, nil, errors.New("openssl output without CRLF CRLF")
	}
	return http.Header(mh), out[i+4:], nil
}

// splitEntity splits a MIME entity into its Content-Type and body.
func splitEntity(raw []byte) (ct string, body []byte, err error) {
	i := bytes.Index(raw, []byte("\r\n\r\n"))
	if i < 0 {
		return "", nil, fmt.Errorf("MIME entity without a blank line: %.80q", raw)
	}
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw[:i+4]))).ReadMIMEHeader()
	if err != nil {
		return "", nil, err
	}
	return h.Get("Content-Type"), raw[i+4:], nil
}

// splitSigned splits a multipart/signed body per RFC 2046: the first part
// exactly as sent and the decoded signature.
func splitSigned(body []byte, boundary string) (part1, sig []byte, err error) {
	delim := []byte("--" + boundary + "\r\n")
	i := bytes.Index(body, delim)
	if i < 0 {
		return nil, nil, fmt.Errorf("no delimiter %q", delim)
	}
	rest := body[i+len(delim):]
	mid := []byte("\r\n--" + boundary + "\r\n")
	j := bytes.Index(rest, mid)
	if j < 0 {
		return nil, nil, errors.New("no second part")
	}
	part1, rest = rest[:j], rest[j+len(mid):]
	k := bytes.Index(rest, []byte("\r\n--"+boundary+"--"))
	if k < 0 {
		return nil, nil, errors.New("no closing delimiter")
	}
	_, b64, err := splitEntity(rest[:k])
	if err != nil {
		return nil, nil, err
	}
	sig, err = base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(b64)))
	return part1, sig, err
}
