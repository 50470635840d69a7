package mdn_test

import (
	"crypto"
	"errors"
	"testing"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

func TestJudge(t *testing.T) {
	sent := as2.ComputeMIC(crypto.SHA256, []byte("the signed part"))
	other := as2.ComputeMIC(crypto.SHA512, []byte("the signed part"))
	recompute := func(alg crypto.Hash) (as2.MIC, error) { return as2.ComputeMIC(alg, []byte("the signed part")), nil }
	cannot := func(crypto.Hash) (as2.MIC, error) { return as2.MIC{}, errors.New("encrypted") }
	var stored []string // every algorithm, as the outbox stores them
	for _, m := range as2.ComputeMICs([]byte("the signed part")) {
		stored = append(stored, m.String())
	}
	// The MIC of the same message built again with other bytes.
	rebuilt := as2.ComputeMIC(crypto.SHA256, []byte("the signed part, rebuilt"))
	const id = "<m1@edihub>"
	tests := []struct {
		name         string
		give         mdn.MDN
		want         mdn.Expectation
		wantErr      error
		wantVerified bool
	}{
		{name: "match", give: report(id, mdn.Processed(), sent.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), SignedReceipt: true}, wantVerified: true},
		{name: "match, brackets dropped, warning", give: report("m1@edihub", mdn.Warned("duplicate-document"), sent.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantVerified: true},
		{name: "other message", give: report("<m2@edihub>", mdn.Processed(), sent.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantErr: mdn.ErrWrongMessage},
		{name: "negative", give: report(id, mdn.Errored("decryption-failed"), "", true), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantErr: mdn.ErrNegative},
		{name: "failed/Failure", give: report(id, mdn.Failed("unsupported MIC-algorithms"), "", false), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantErr: mdn.ErrNegative},
		{name: "mismatch", give: report(id, mdn.Processed(), as2.ComputeMIC(crypto.SHA256, []byte("x")).String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantErr: mdn.ErrMICMismatch},
		{name: "malformed MIC", give: report(id, mdn.Processed(), "not a MIC", true), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantErr: mdn.ErrMICMismatch},
		{name: "unsigned, no MIC, unsigned receipt", give: report(id, mdn.Processed(), "", false), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantVerified: false},
		{name: "signed, no MIC", give: report(id, mdn.Processed(), "", true), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantErr: mdn.ErrNoMIC},
		{name: "unsigned, no MIC, signed receipt asked", give: report(id, mdn.Processed(), "", false), want: mdn.Expectation{MessageID: id, MIC: sent.String(), SignedReceipt: true}, wantErr: mdn.ErrNoMIC},
		{name: "other algorithm, recomputed", give: report(id, mdn.Processed(), other.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), Recompute: recompute}, wantVerified: true},
		{name: "other algorithm, not recomputable", give: report(id, mdn.Processed(), other.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), Recompute: cannot}, wantErr: mdn.ErrMICMismatch},
		{name: "other algorithm, no recompute", give: report(id, mdn.Processed(), other.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String()}, wantErr: mdn.ErrMICMismatch},
		{name: "other algorithm, stored", give: report(id, mdn.Processed(), other.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), MICs: stored, Recompute: cannot}, wantVerified: true},
		{name: "other algorithm, stored, wrong value", give: report(id, mdn.Processed(), as2.ComputeMIC(crypto.SHA384, []byte("x")).String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), MICs: stored}, wantErr: mdn.ErrMICMismatch},
		{name: "rebuilt body's MIC, added to the stored", give: report(id, mdn.Processed(), rebuilt.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), MICs: append(stored[:len(stored):len(stored)], rebuilt.String())}, wantVerified: true},
		{name: "another body's MIC, not stored", give: report(id, mdn.Processed(), rebuilt.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), MICs: stored}, wantErr: mdn.ErrMICMismatch},
		{name: "other algorithm, not stored, recomputed", give: report(id, mdn.Processed(), other.String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), MICs: stored[:2], Recompute: recompute}, wantVerified: true},
		{name: "other algorithm, wrong value", give: report(id, mdn.Processed(), as2.ComputeMIC(crypto.SHA512, []byte("x")).String(), true), want: mdn.Expectation{MessageID: id, MIC: sent.String(), Recompute: recompute}, wantErr: mdn.ErrMICMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := mdn.Judge(&tt.give, tt.want)
			if tt.wantErr != nil {
				if !errors.Is(v.Err, tt.wantErr) || v.Delivered {
					t.Errorf("Judge = {delivered %v, err %v}, want err %v", v.Delivered, v.Err, tt.wantErr)
				}
				return
			}
			if v.Err != nil || !v.Delivered || v.MICVerified != tt.wantVerified {
				t.Errorf("Judge = {delivered %v, verified %v, err %v}, want delivered, verified %v", v.Delivered, v.MICVerified, v.Err, tt.wantVerified)
			}
			if v.Disposition != tt.give.Disposition.String() {
				t.Errorf("Judge disposition %q, want %q", v.Disposition, tt.give.Disposition.String())
			}
		})
	}
}

func report(id string, d mdn.Disposition, mic string, signed bool) mdn.MDN {
	return mdn.MDN{Report: mdn.Report{OriginalMessageID: id, Disposition: d, MIC: mic}, Signed: signed}
}

// TestRecomputeMIC checks RecomputeMIC against the MIC as2.Wrap computed
// when building: the same algorithm gives the same MIC, for signed and
// unsigned messages; another gives the digest of the same bytes; an
// encrypted message is refused.
func TestRecomputeMIC(t *testing.T) {
	ids := openssltest.Keys(t)
	tests := []struct {
		name    string
		opts    as2.WrapOptions
		wantErr bool
	}{
		{name: "signed", opts: as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert}},
		{name: "signed, compressed first", opts: as2.WrapOptions{Sign: crypto.SHA256, SignerKey: ids.A.Key, SignerCert: ids.A.Cert, Compress: as2.CompressBeforeSigning}},
		{name: "plain", opts: as2.WrapOptions{}},
		{name: "plain, base64", opts: as2.WrapOptions{TransferEncoding: as2.Base64}},
		{name: "compressed", opts: as2.WrapOptions{Compress: as2.CompressBeforeSigning}},
		{name: "encrypted", opts: as2.WrapOptions{Encrypt: cms.AES128CBC, RecipientCert: ids.B.Cert}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := as2.Wrap([]byte("ISA*00*recompute~"), "application/EDI-X12", "r.x12", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := mdn.RecomputeMIC(w.Header, w.Body, w.MIC.Alg, tt.opts.Encrypt != 0, as2.Limits{})
			if tt.wantErr {
				if err == nil {
					t.Errorf("RecomputeMIC(encrypted) = %v, want an error", got)
				}
				return
			}
			if err != nil || !got.Equal(w.MIC) {
				t.Fatalf("RecomputeMIC(%s) = %v, %v; want the build's %v", w.MIC.Alg, got, err, w.MIC)
			}
			got512, err := mdn.RecomputeMIC(w.Header, w.Body, crypto.SHA512, false, as2.Limits{})
			if err != nil || got512.Alg != crypto.SHA512 || got512.Equal(w.MIC) {
				t.Errorf("RecomputeMIC(SHA-512) = %v, %v; want a SHA-512 MIC", got512, err)
			}
		})
	}
}
