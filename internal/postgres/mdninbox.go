package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// InboxMDN is an asynchronous MDN as posted to /as2, kept raw for the
// leader's MDN poller.
type InboxMDN struct {
	// AS2From and AS2To are the unquoted AS2 names, or the raw header
	// values when they did not parse.
	AS2From, AS2To string
	// Header holds the request's header fields; Body the body as received.
	Header http.Header
	Body   []byte
	// OriginalMessageID is the Original-Message-ID of the report when it
	// could be read, else "".
	OriginalMessageID string
}

// SaveInboxMDN appends m to the MDN inbox and returns its id.
func (s *Store) SaveInboxMDN(ctx context.Context, m *InboxMDN) (int64, error) {
	hdr, err := json.Marshal(m.Header)
	if err != nil {
		return 0, fmt.Errorf("save inbox MDN: encode header: %w", err)
	}
	var id int64
	err = s.pool.QueryRow(ctx, `
INSERT INTO mdn_inbox (as2_from, as2_to, content_type, headers, body, original_message_id)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
		m.AS2From, m.AS2To, m.Header.Get("Content-Type"), string(hdr), m.Body, m.OriginalMessageID).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("save inbox MDN: %w", err)
	}
	return id, nil
}
