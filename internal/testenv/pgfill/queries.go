package pgfill

import (
	"context"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/postgres"
)

// Query is what one console page or API listing reads, with parameters
// that find rows in a filled database.
type Query struct {
	Name string
	Run  func(ctx context.Context, st *postgres.Store) error
}

// PageSize is the page the queries ask for: the console's 50 rows and
// the one more that tells whether a next page exists.
const PageSize = 51

// Queries are the reads of the ops console's pages and the API's
// listings over d: the message list with each filter and the common
// combinations, its second page, a message's trace, the MDN inbox and
// its orphans, the overdue messages, the partners' health, the hub's
// figures and state, the day reports and today's report figures.
func (d *Data) Queries() []Query {
	quiet, busy := d.Partners[len(d.Partners)-1], d.Partners[0]
	day := d.Start.Add(-200 * 24 * time.Hour)
	list := func(q postgres.MessageQuery) func(context.Context, *postgres.Store) error {
		if q.Limit == 0 {
			q.Limit = PageSize
		}
		return func(ctx context.Context, st *postgres.Store) error {
			_, err := st.Messages(ctx, q)
			return err
		}
	}
	today := d.Start.Truncate(24 * time.Hour)
	return []Query{
		{"list", list(postgres.MessageQuery{})},
		{"list, page 2", list(postgres.MessageQuery{Before: d.LastID - PageSize + 1})},
		{"list, page 2000", list(postgres.MessageQuery{Before: d.LastID - 2000*(PageSize-1)})},
		{"partner (the busiest)", list(postgres.MessageQuery{Partner: busy})},
		{"partner (the quietest)", list(postgres.MessageQuery{Partner: quiet})},
		{"partner, page 2", list(postgres.MessageQuery{Partner: quiet, Before: d.LastID - 20*PageSize})},
		{"direction", list(postgres.MessageQuery{Direction: "inbound"})},
		{"status failed", list(postgres.MessageQuery{Status: "failed"})},
		{"status retrying", list(postgres.MessageQuery{Status: "retrying"})},
		{"status failed, page 2", list(postgres.MessageQuery{Status: "failed", Before: d.LastID / 2})},
		{"partner and status", list(postgres.MessageQuery{Partner: quiet, Status: "failed"})},
		{"partner and direction", list(postgres.MessageQuery{Partner: quiet, Direction: "outbound"})},
		{"direction and status", list(postgres.MessageQuery{Direction: "outbound", Status: "failed"})},
		{"partner, direction and status", list(postgres.MessageQuery{Partner: busy, Direction: "outbound", Status: "retrying"})},
		{"date range (a day, 200 days ago)", list(postgres.MessageQuery{Since: day, Until: day.Add(24 * time.Hour)})},
		{"date range (since 30 days)", list(postgres.MessageQuery{Since: d.Start.Add(-30 * 24 * time.Hour)})},
		{"date range (100 days, a year ago)", list(postgres.MessageQuery{Since: d.Start.Add(-400 * 24 * time.Hour), Until: d.Start.Add(-300 * 24 * time.Hour)})},
		{"date range and partner", list(postgres.MessageQuery{Partner: quiet, Since: day, Until: day.Add(24 * time.Hour)})},
		{"date range and status", list(postgres.MessageQuery{Status: "failed", Since: day, Until: day.Add(7 * 24 * time.Hour)})},
		{"Message-ID", list(postgres.MessageQuery{MessageID: strings.Trim(d.InboundMessageID, "<>")})},
		{"Message-ID and partner", list(postgres.MessageQuery{MessageID: d.InboundMessageID, Partner: busy})},
		{"file name prefix (a day's invoices)", list(postgres.MessageQuery{Filename: d.DayFilenamePrefix})},
		{"file name prefix (a sixth of all)", list(postgres.MessageQuery{Filename: d.TypeFilenamePrefix})},
		{"file name prefix and partner", list(postgres.MessageQuery{Filename: d.DayFilenamePrefix, Partner: quiet})},
		{"overdue MDNs", list(postgres.MessageQuery{Overdue: true})},
		{"overdue MDNs of a partner", list(postgres.MessageQuery{Overdue: true, Partner: busy})},
		{"trace", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.MessageTrace(ctx, d.Traced)
			return err
		}},
		{"trace (inbound)", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.MessageTrace(ctx, d.Inbound)
			return err
		}},
		{"trace's outbox rows", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.MessageOutbox(ctx, d.Traced)
			return err
		}},
		{"MDN inbox", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.InboxMDNs(ctx, postgres.InboxQuery{Limit: PageSize})
			return err
		}},
		{"orphan MDNs", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.InboxMDNs(ctx, postgres.InboxQuery{State: postgres.InboxOrphan, Limit: PageSize})
			return err
		}},
		{"orphan MDNs, page 2", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.InboxMDNs(ctx, postgres.InboxQuery{State: postgres.InboxOrphan, Before: d.Orphan, Limit: PageSize})
			return err
		}},
		{"partners' health", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.PartnersHealth(ctx, d.Partners)
			return err
		}},
		{"hub figures", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.HubFigures(ctx)
			return err
		}},
		{"hub state (term, heartbeat, backlog by kind, MDN inbox)", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.HubState(ctx, "edihub-leader")
			return err
		}},
		{"day reports", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.ReportDays(ctx, 14)
			return err
		}},
		{"today's report figures", func(ctx context.Context, st *postgres.Store) error {
			_, err := st.DayTraffic(ctx, today, today.Add(24*time.Hour), "edihub-leader")
			return err
		}},
	}
}
