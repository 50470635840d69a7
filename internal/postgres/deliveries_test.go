package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// startDeliveries places the deliveries cursor at the end of the feed,
// as the forwarder's first run does on a replica.
func startDeliveries(t *testing.T, st *postgres.Store) {
	t.Helper()
	r, err := st.ForwardDeliveries(context.Background(), postgres.DeliveryForward{Cursor: postgres.DeliveryCursor,
		Route: func(d connector.Document) (string, []string) {
			t.Errorf("Route(%+v) before anything was received", d)
			return "", nil
		}})
	if err != nil || r != (postgres.Forwarded{}) {
		t.Fatalf("first ForwardDeliveries = %+v, %v; want nothing read", r, err)
	}
}

// ediReceipt is a processed receipt from ACME of acmePO, with its envelope.
func ediReceipt(t *testing.T, id string) *postgres.InboundMessage {
	m := &postgres.InboundMessage{Partner: "ACME", AS2From: "ACME", AS2To: "EDIHUB", MessageID: "<" + id + ">",
		Status: postgres.InboundProcessed, Filename: "po.x12", ContentType: "application/edi-x12",
		MIC: "bWlj, sha-256", Payload: []byte(acmePO), PayloadSize: int64(len(acmePO)), MDNMode: "none",
		EDI: &postgres.InboundEDI{Record: postgres.EDIRecord{Partner: "ACME", Direction: "inbound", Doc: parseEDI(t, acmePO)}}}
	return m
}

func saveInbound(t *testing.T, st *postgres.Store, m *postgres.InboundMessage) int64 {
	t.Helper()
	id, err := st.SaveInbound(context.Background(), m)
	if err != nil {
		t.Fatalf("SaveInbound(%s): %v", m.MessageID, err)
	}
	return id
}

func countSQL(t *testing.T, st *postgres.Store, sql string, args ...any) int64 {
	t.Helper()
	n, err := st.CountSQL(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestForwardDeliveries: a received document is queued once per
// destination its route names (a name given twice once), with the
// document the route needs read from the message and its envelope; a
// document no route takes is not queued; a second call queues nothing.
func TestForwardDeliveries(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	startDeliveries(t, st)
	routed := saveInbound(t, st, ediReceipt(t, "po-1@acme"))
	unrouted := saveInbound(t, st, receipt("<other@p>"))

	var got []connector.Document
	route := func(d connector.Document) (string, []string) {
		got = append(got, d)
		if d.Partner == "ACME" && d.Type == "850" {
			return "orders", []string{"erp", "lake", "erp"}
		}
		return "", nil
	}
	r, err := st.ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor, Route: route, MaxAttempts: 3})
	if err != nil || r != (postgres.Forwarded{Events: 2, Queued: 2}) {
		t.Fatalf("ForwardDeliveries = %+v, %v; want 2 events read, 2 deliveries queued", r, err)
	}
	want := []connector.Document{
		{ID: routed, MessageID: "po-1@acme", Partner: "ACME", Station: "EDIHUB", Direction: "inbound", Standard: "x12",
			Type: "850", GroupType: "PO", ICN: "000000123", ContentType: "application/edi-x12", FileName: "po.x12", MIC: "bWlj, sha-256",
			Size: int64(len(acmePO))},
		{ID: unrouted, MessageID: "other@p", Partner: "P", Station: "S", Direction: "inbound", ContentType: "application/edi-x12",
			FileName: "ORDERS_1.edi", Size: 7},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(connector.Document{}, "Time")); diff != "" {
		t.Errorf("documents routed (-want +got):\n%s", diff)
	}
	for _, d := range got {
		if time.Since(d.Time) > time.Hour || d.Time.IsZero() {
			t.Errorf("document %d time %v, want when it was received", d.ID, d.Time)
		}
	}
	if n := countSQL(t, st, `SELECT count(*) FROM outbox WHERE kind = 'delivery' AND message_id = $1 AND route = 'orders'
	   AND destination IN ('erp', 'lake') AND status = 'pending' AND max_attempts = 3`, routed); n != 2 {
		t.Errorf("deliveries of the routed document = %d, want 2 (erp, lake)", n)
	}
	if n := countSQL(t, st, `SELECT count(*) FROM outbox WHERE message_id = $1`, unrouted); n != 0 {
		t.Errorf("outbox rows of the unrouted document = %d, want 0", n)
	}
	if r, err := st.ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor, Route: route}); err != nil || r != (postgres.Forwarded{}) {
		t.Errorf("second ForwardDeliveries = %+v, %v; want nothing", r, err)
	}
}

// TestForwardDeliveriesConcurrently: two replicas (each with its own
// pool) forwarding at once in small batches read every event once between
// them and queue one delivery per document and destination.
func TestForwardDeliveriesConcurrently(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	var replicas []*postgres.Store
	for range 2 {
		st, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		replicas = append(replicas, st)
	}
	st := replicas[0]
	startDeliveries(t, st)
	const docs = 40
	for i := range docs {
		saveInbound(t, st, receipt(fmt.Sprintf("<c-%d@p>", i)))
	}
	var events, routed atomic.Int64
	route := func(connector.Document) (string, []string) {
		routed.Add(1)
		return "all", []string{"a", "b"}
	}
	var wg sync.WaitGroup
	for replica := range 2 {
		wg.Go(func() {
			for events.Load() < docs {
				r, err := replicas[replica].ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor, Limit: 3, Route: route})
				if err != nil {
					t.Errorf("replica %d: ForwardDeliveries: %v", replica, err)
					return
				}
				events.Add(int64(r.Events))
			}
		})
	}
	wg.Wait()
	if events.Load() != docs || routed.Load() != docs {
		t.Errorf("events read %d, documents routed %d; want %d each (every event once)", events.Load(), routed.Load(), docs)
	}
	if n := countSQL(t, st, `SELECT count(*) FROM outbox WHERE kind = 'delivery'`); n != 2*docs {
		t.Errorf("deliveries = %d, want %d", n, 2*docs)
	}
}

// TestDeliveryOutcomeEvents: a delivery's name is fixed by its first
// attempt; its success and its final failure (by the dispatcher, or by
// the claim giving up on a row whose attempts ran out) each write one
// event with the destination and the name, and the message's trace lists
// its deliveries.
func TestDeliveryOutcomeEvents(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	startDeliveries(t, st)
	id := saveInbound(t, st, ediReceipt(t, "po-2@acme"))
	if _, err := st.ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor, MaxAttempts: 1,
		Route: func(connector.Document) (string, []string) { return "orders", []string{"erp", "lake"} }}); err != nil {
		t.Fatal(err)
	}
	claim := func() []postgres.OutboxItem {
		items, err := st.ClaimOutboxKinds(ctx, "r1", time.Minute, 10, []string{postgres.OutboxKindDelivery})
		if err != nil {
			t.Fatal(err)
		}
		return items
	}
	items := claim()
	if len(items) != 2 {
		t.Fatalf("claimed %d deliveries, want 2", len(items))
	}
	byDest := map[string]postgres.OutboxItem{}
	for _, it := range items {
		d, err := st.Delivery(ctx, it)
		if err != nil || d.Name != "" || d.Document.ID != id || d.Route != "orders" {
			t.Fatalf("Delivery(%d) = %+v, %v", it.ID, d, err)
		}
		byDest[d.Destination] = it
	}
	erp := byDest["erp"]
	for _, name := range []string{"ACME/a.x12", "ACME/other.x12"} {
		if got, err := st.FixDeliveryName(ctx, erp, name); err != nil || got != "ACME/a.x12" {
			t.Errorf("FixDeliveryName(%q) = %q, %v; want the first name kept", name, got, err)
		}
	}
	if err := st.FinishOutbox(ctx, erp, postgres.OutboxResult{State: postgres.OutboxDone}); err != nil {
		t.Fatal(err)
	}
	// lake's only attempt never finishes: the next claim gives up on it.
	if err := st.ExpireClaims(ctx); err != nil {
		t.Fatal(err)
	}
	if items := claim(); len(items) != 0 {
		t.Fatalf("claim after lake's last attempt = %+v, want nothing", items)
	}

	tr, err := st.MessageTrace(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		Type   string
		Detail map[string]any
	}
	var got []ev
	for _, e := range tr.Events {
		var d map[string]any
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			t.Fatal(err)
		}
		if e.Type == postgres.EventReceived {
			continue
		}
		got = append(got, ev{e.Type, d})
	}
	want := []ev{
		{postgres.EventDeliveryDone, map[string]any{"message_id": "<po-2@acme>", "destination": "erp", "route": "orders", "name": "ACME/a.x12", "attempts": 1.0}},
		{postgres.EventDeliveryFailed, map[string]any{"message_id": "<po-2@acme>", "destination": "lake", "route": "orders", "attempts": 1.0,
			"error": "gave up after 1 attempts; the last one did not finish (crash or shutdown)"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delivery events (-want +got):\n%s", diff)
	}
	var dels []string
	for _, d := range tr.Deliveries {
		dels = append(dels, fmt.Sprintf("%s %s %s %d %v", d.Destination, d.Name, d.Status, d.Attempts, d.FinishedAt != nil))
	}
	if diff := cmp.Diff([]string{"erp ACME/a.x12 done 1 true", "lake  failed 1 true"}, dels); diff != "" {
		t.Errorf("trace deliveries (-want +got):\n%s", diff)
	}
}

// TestDeliveryBacklogs: pending deliveries are counted per destination;
// finished ones are not.
func TestDeliveryBacklogs(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	startDeliveries(t, st)
	for i := range 3 {
		saveInbound(t, st, receipt(fmt.Sprintf("<b-%d@p>", i)))
	}
	n := 0
	if _, err := st.ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor,
		Route: func(connector.Document) (string, []string) {
			n++
			if n == 1 {
				return "r", []string{"a", "b"}
			}
			return "r", []string{"a"}
		}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.DeliveryBacklogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range got {
		if b.Oldest < 0 || b.Oldest > time.Hour {
			t.Errorf("backlog of %s: oldest %v", b.Destination, b.Oldest)
		}
	}
	want := []postgres.DeliveryBacklog{{Destination: "a", Pending: 3}, {Destination: "b", Pending: 1}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(postgres.DeliveryBacklog{}, "Oldest")); diff != "" {
		t.Errorf("DeliveryBacklogs (-want +got):\n%s", diff)
	}
}

// TestPurgeKeepsPendingDelivery: a received message past the retention
// keeps its payload and its row while a delivery of it is pending; once
// the delivery is done, both go.
func TestPurgeKeepsPendingDelivery(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	f := openPurgeTerm(t, st)
	startDeliveries(t, st)
	id := saveInbound(t, st, receipt("<old@p>"))
	if _, err := st.ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor,
		Route: func(connector.Document) (string, []string) { return "r", []string{"erp"} }}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `UPDATE messages SET created_at = now() - interval '40 days', completed_at = now() - interval '40 days' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecSQL(ctx, `UPDATE payloads SET created_at = now() - interval '40 days' WHERE message_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	purge := func(kind string) int64 {
		n, err := st.PurgeBatch(ctx, f, kind, 30*24*time.Hour, 10)
		if err != nil {
			t.Fatalf("PurgeBatch(%s): %v", kind, err)
		}
		return n
	}
	if p, m := purge(postgres.PurgePayloads), purge(postgres.PurgeMessages); p != 0 || m != 0 {
		t.Fatalf("purged %d payloads, %d messages while the delivery is pending; want 0, 0", p, m)
	}
	items, err := st.ClaimOutboxKinds(ctx, "r1", time.Minute, 10, []string{postgres.OutboxKindDelivery})
	if err != nil || len(items) != 1 {
		t.Fatalf("claim = %+v, %v", items, err)
	}
	if err := st.FinishOutbox(ctx, items[0], postgres.OutboxResult{State: postgres.OutboxDone}); err != nil {
		t.Fatal(err)
	}
	if p := purge(postgres.PurgePayloads); p != 1 {
		t.Errorf("purged %d payloads once the delivery is done, want 1", p)
	}
}
