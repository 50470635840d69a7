package outbox

import (
	"crypto"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
)

// digest maps a config digest name to its hash.
func digest(name string) (crypto.Hash, error) {
	switch name {
	case "":
		return 0, nil
	case config.DigestSHA1:
		return crypto.SHA1, nil
	case config.DigestSHA256:
		return crypto.SHA256, nil
	case config.DigestSHA384:
		return crypto.SHA384, nil
	case config.DigestSHA512:
		return crypto.SHA512, nil
	}
	return 0, fmt.Errorf("unsupported digest %q", name)
}

func cipherFor(name string) (cms.Cipher, error) {
	switch name {
	case "":
		return 0, nil
	case config.CipherAES128CBC:
		return cms.AES128CBC, nil
	case config.CipherAES192CBC:
		return cms.AES192CBC, nil
	case config.CipherAES256CBC:
		return cms.AES256CBC, nil
	case config.Cipher3DES:
		return cms.DESEDE3CBC, nil
	case config.CipherAES128GCM:
		return cms.AES128GCM, nil
	case config.CipherAES256GCM:
		return cms.AES256GCM, nil
	}
	return 0, fmt.Errorf("unsupported cipher %q", name)
}

// wrapOptions turns a partner profile into as2.WrapOptions.
func wrapOptions(st *config.Station, p *config.Partner, now time.Time, rnd io.Reader) (as2.WrapOptions, error) {
	var o as2.WrapOptions
	var err error
	if o.Sign, err = digest(p.Sign); err != nil {
		return o, err
	}
	if o.Sign != 0 {
		o.SignerKey, o.SignerCert = st.PrivateKey, st.Certificate
		o.RFC3851MICAlg = p.MICAlgNames == config.MICAlgNamesRFC3851
	}
	if o.Encrypt, err = cipherFor(p.Encrypt); err != nil {
		return o, err
	}
	if o.Encrypt != 0 {
		o.RecipientCert = p.EncryptionCertificate(now)
		switch p.KeyEncryption {
		case config.KeyEncryptionOAEPSHA1:
			o.OAEP, o.OAEPHash = true, crypto.SHA1
		case config.KeyEncryptionOAEPSHA256:
			o.OAEP, o.OAEPHash = true, crypto.SHA256
		case config.KeyEncryptionOAEPSHA384:
			o.OAEP, o.OAEPHash = true, crypto.SHA384
		case config.KeyEncryptionOAEPSHA512:
			o.OAEP, o.OAEPHash = true, crypto.SHA512
		}
	}
	if p.Compress {
		o.Compress = as2.CompressBeforeSigning
		if p.CompressOrder == config.CompressAfterSigning {
			o.Compress = as2.CompressAfterSigning
		}
	}
	if p.TransferEncoding == config.TransferEncodingBase64 {
		o.TransferEncoding = as2.Base64
	}
	if o.MICAlg, err = digest(p.MDNMICAlg); err != nil {
		return o, err
	}
	if p.MICIncludeHeaders {
		o.UnsignedMIC = as2.MICWithHeaders
	}
	o.Time = now
	o.Rand = rnd
	return o, nil
}

// Build wraps src for partner p with the station st's active key and
// returns the frozen message: the AS2 and MIME header fields (AS2 names in
// their conventional spelling, never folded), the body and the MIC the
// partner's MDN must return. It is the one place an outbound message is
// built in memory: the dispatcher builds every message up to its spool
// threshold with it (BuildStream the larger ones), and a connectivity
// test (package probe) its test message, so the test sends what a real
// message would. now is the Date and signing time, rnd supplies key
// material, IVs and boundaries (nil means crypto/rand). A profile edihub
// cannot build (an unknown algorithm) is an error naming the partner.
func Build(st *config.Station, p *config.Partner, src postgres.OutboundSource, now time.Time, rnd io.Reader) (postgres.OutboundBuild, error) {
	opts, err := wrapOptions(st, p, now, rnd)
	if err != nil {
		return postgres.OutboundBuild{}, fmt.Errorf("partner %q profile: %w", p.AS2ID, err)
	}
	w, err := as2.Wrap(src.Payload, src.ContentType, src.Filename, opts)
	if err != nil {
		return postgres.OutboundBuild{}, err
	}
	b, err := frozen(src, opts, w, now)
	b.Body = w.Body
	return b, err
}

// BuildStream is Build for a payload of any size: writePayload writes the
// payload (src.Payload is not used) to the writer it is given, and the
// message body goes to dst as it is built, never held whole (see
// as2.WrapWriter); the OutboundBuild has no Body, and its MICs hold the
// MIC alone when src asks for no MDN. A payload holding the drawn
// multipart boundary wraps as2.ErrBoundaryInContent (build again). Errors
// of writePayload and dst are returned as they are. in, when not nil,
// records what the build draws or, filled, replays it (see
// as2.StreamInputs): built again with the same now and in, a message has
// the same bytes.
func BuildStream(st *config.Station, p *config.Partner, src postgres.OutboundSource, writePayload func(io.Writer) error, dst io.Writer, now time.Time, rnd io.Reader, in *as2.StreamInputs) (postgres.OutboundBuild, error) {
	ww, opts, err := openStream(st, p, src, dst, now, rnd, in)
	if err != nil {
		return postgres.OutboundBuild{}, err
	}
	defer ww.Abort() // ends its goroutines on every path; a no-op once closed
	if err := writePayload(ww); err != nil {
		return postgres.OutboundBuild{}, err
	}
	return closeStream(ww, src, opts, now)
}

// openStream starts BuildStream's build: the WrapWriter the payload is
// written to (Abort it on every path) and the options it was made with.
func openStream(st *config.Station, p *config.Partner, src postgres.OutboundSource, dst io.Writer, now time.Time, rnd io.Reader, in *as2.StreamInputs) (*as2.WrapWriter, as2.WrapOptions, error) {
	opts, err := wrapOptions(st, p, now, rnd)
	if err != nil {
		return nil, opts, fmt.Errorf("partner %q profile: %w", p.AS2ID, err)
	}
	opts.Inputs = in
	// The MIC in other algorithms serves only to judge an MDN: without
	// one asked for (frozen's rule) it would be four more digests of every
	// byte for nothing.
	opts.OneMIC = src.MDNMode == config.MDNNone
	ww, err := as2.NewWrapWriter(dst, src.ContentType, src.Filename, opts)
	return ww, opts, err
}

// closeStream ends the build of openStream once its payload was written.
func closeStream(ww *as2.WrapWriter, src postgres.OutboundSource, opts as2.WrapOptions, now time.Time) (postgres.OutboundBuild, error) {
	w, err := ww.Close()
	if err != nil {
		return postgres.OutboundBuild{}, err
	}
	return frozen(src, opts, w, now)
}

// frozen is the build of src wrapped as w per opts, but for its body.
func frozen(src postgres.OutboundSource, opts as2.WrapOptions, w *as2.Wrapped, now time.Time) (postgres.OutboundBuild, error) {
	var b postgres.OutboundBuild
	from, err := as2.FormatAS2Name(src.AS2From)
	if err != nil {
		return b, fmt.Errorf("AS2-From: %w", err)
	}
	to, err := as2.FormatAS2Name(src.AS2To)
	if err != nil {
		return b, fmt.Errorf("AS2-To: %w", err)
	}
	// Keys are set directly, not through Header.Set, so that they go out in
	// the spelling AS2 products print (AS2-From, Message-ID); HTTP field
	// names are case-insensitive, so this is cosmetic but friendlier.
	h := http.Header{}
	h["AS2-Version"] = []string{"1.2"}
	h["AS2-From"] = []string{from}
	h["AS2-To"] = []string{to}
	h["Message-ID"] = []string{src.MessageID}
	h["Subject"] = []string{src.Subject}
	h["Date"] = []string{now.UTC().Format(time.RFC1123Z)}
	h["MIME-Version"] = []string{"1.0"}
	h["User-Agent"] = []string{"edihub"}
	h["EDIINT-Features"] = []string{as2.EDIINTFeatures}
	for k, v := range w.Header {
		if k == "Mime-Version" {
			continue
		}
		h[k] = v
	}
	if src.MDNMode != config.MDNNone {
		h["Disposition-Notification-To"] = []string{src.AS2From}
		if src.MDNSigned {
			alg := opts.MICAlg
			if opts.Sign != 0 {
				alg = opts.Sign
			}
			h["Disposition-Notification-Options"] = []string{mdn.RequestOptions(alg)}
		}
		if src.MDNMode == config.MDNAsync {
			h["Receipt-Delivery-Option"] = []string{src.MDNURL}
		}
	}
	b.Headers = h
	b.MIC = w.MIC.String()
	b.MICAlg = as2.MICAlgName(w.MIC.Alg)
	for _, m := range w.MICs {
		b.MICs = append(b.MICs, m.String())
	}
	b.Signed = opts.Sign != 0
	b.Encrypted = opts.Encrypt != 0
	b.Compressed = opts.Compress != as2.CompressNone
	return b, nil
}
