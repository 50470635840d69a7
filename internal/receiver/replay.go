package receiver

import (
	"context"
	"crypto"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
)

// replayFinder claims signed content and finds earlier signed messages
// by MIC.
type replayFinder interface {
	ClaimSignedContent(ctx context.Context, partner, messageID, digest string, now, since time.Time) (string, error)
	SignedMICAlgs(ctx context.Context, partner, messageID string, since time.Time) ([]string, error)
	SignedByMIC(ctx context.Context, partner, messageID string, mics []string, since time.Time) (string, error)
}

// errReplay means the same signed content arrived before under another
// Message-ID and the partner's profile refuses replays.
var errReplay = errors.New("replay of signed content")

// checkReplay looks for the same signed content received from partner
// under another Message-ID within its replay window: a captured message
// replayed with a fresh Message-ID (which the duplicate check cannot
// catch), or a partner resending with a new ID. Such a message is logged
// and counted; with refuse_replays it is refused (authentication-failed).
// The content's SHA-256 is claimed first, in one statement (of two
// deliveries of the same content at once, one passes); then the stored
// messages are looked up (content received before the claims were kept):
// their MICs may be in any algorithm, so the content is digested in each
// algorithm found among them. A failing claim or lookup is logged, never
// fatal.
func (h *Handler) checkReplay(ctx context.Context, log *zap.Logger, partner *config.Partner, messageID string, m *as2.Message) error {
	rf := h.o.Store
	content := signedContent{bytes: m.SignedContent, digests: m.SignedDigests}
	if partner.ReplayWindow <= 0 || (m.SignedContent == nil && m.SignedDigests == nil) {
		return nil
	}
	now := h.o.Now()
	since := now.Add(-partner.ReplayWindow)
	digest, _ := content.mic(crypto.SHA256)
	first, err := rf.ClaimSignedContent(ctx, partner.AS2ID, messageID, hex.EncodeToString(digest.Digest), now, since)
	if err != nil {
		log.Warn("replay check", zap.Error(err))
	}
	if first == "" {
		if first = h.storedReplay(ctx, log, rf, partner.AS2ID, messageID, content, since); first == "" {
			return nil
		}
	}
	action := "flagged"
	if partner.RefuseReplays {
		action = "refused"
	}
	h.metrics.replays.WithLabelValues(partner.AS2ID, action).Inc()
	log.Warn("signed content received before under another Message-ID", zap.String("first_message_id", first),
		zap.Duration("window", partner.ReplayWindow), zap.String("action", action))
	if !partner.RefuseReplays {
		return nil
	}
	return &as2.Error{Disposition: as2.DispositionAuthenticationFailed, Err: fmt.Errorf("%w: first received as %s", errReplay, first)}
}

// storedReplay returns the Message-ID of a stored signed message partner
// sent since, other than messageID, with content's MIC, or "".
func (h *Handler) storedReplay(ctx context.Context, log *zap.Logger, rf replayFinder, partner, messageID string, content signedContent, since time.Time) string {
	algs, err := rf.SignedMICAlgs(ctx, partner, messageID, since)
	if err != nil {
		log.Warn("replay check", zap.Error(err))
		return ""
	}
	var mics []string
	for _, name := range algs {
		if alg, err := as2.ParseMICAlg(name); err == nil {
			if mic, ok := content.mic(alg); ok {
				mics = append(mics, mic.String())
			}
		}
	}
	if len(mics) == 0 {
		return ""
	}
	first, err := rf.SignedByMIC(ctx, partner, messageID, mics, since)
	if err != nil {
		log.Warn("replay check", zap.Error(err))
		return ""
	}
	return first
}
