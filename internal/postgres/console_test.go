package postgres_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgfill"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// large are the tables that grow with the traffic: a sequential scan of
// one is a page that slows down as the hub gets older.
var large = []string{"messages", "events", "message_attempts", "mdn_inbox", "mdns", "outbox"}

// TestConsoleQueriesUseIndexes: on a database of a million messages
// (pgfill), every statement that each console page and API listing runs
// (pgfill's Queries, recorded as the store sends them, with their
// parameters) reads the large tables through indexes only: no plan has a
// sequential scan of one, neither the plan made for the parameters
// (PostgreSQL's first five executions of a prepared statement) nor the
// generic plan it may switch to afterwards. A failure prints the plan.
// With -v each statement's scans are logged.
func TestConsoleQueriesUseIndexes(t *testing.T) {
	ctx := context.Background()
	url, d := pgfill.Shared(t)
	st, take, err := postgres.OpenRecording(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	conn := pgtest.Conn(t, url)
	used := map[string]bool{}
	for _, q := range d.Queries() {
		t.Run(q.Name, func(t *testing.T) {
			take()
			if err := q.Run(ctx, st); err != nil {
				t.Fatalf("%s: %v", q.Name, err)
			}
			reads := 0
			for _, s := range take() {
				if !isRead(s.SQL) {
					continue
				}
				reads++
				for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
					plan := explain(t, conn, mode, s)
					scans := scansOf(t, plan)
					for _, sc := range scans {
						if sc.node == "Seq Scan" && slices.Contains(large, sc.relation) {
							t.Errorf("%s (%s): sequential scan of %s in\n%s\nplan:\n%s", q.Name, mode, sc.relation, s.SQL, plan)
						}
					}
					for _, sc := range scans {
						used[sc.index] = true
					}
					t.Logf("%s, %s: %s", q.Name, strings.TrimPrefix(mode, "force_"), summary(scans))
				}
			}
			if reads == 0 {
				t.Fatalf("%s ran no SELECT: nothing was checked", q.Name)
			}
		})
	}
	// Migration 00011 adds no index that no page needs (00018 replaced
	// its index on message_id with the unique one leading with it).
	for _, idx := range traceIndexes {
		if !used[idx] {
			t.Errorf("no console query uses index %s", idx)
		}
	}
}

// traceIndexes are the indexes migration 00011 adds for the console, as
// migration 00018 left them.
var traceIndexes = []string{
	"message_attempts_message_idx", "events_message_idx", "messages_message_id_partner_direction_key", "messages_filename_idx",
	"messages_status_id_idx", "messages_partner_status_id_idx", "mdn_inbox_message_ref_idx",
	"mdn_inbox_original_message_id_idx", "messages_outbound_completed_at_idx",
}

// isRead reports a statement to explain: a query, not BEGIN or COMMIT.
func isRead(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(sql))
	return strings.HasPrefix(s, "SELECT") || strings.HasPrefix(s, "WITH")
}

// explain returns the JSON plan of s with its arguments under
// plan_cache_mode mode: s is prepared, and EXECUTE'd with each argument
// as a literal (its text form, which the parameter's type reads back).
func explain(t *testing.T, conn *pgx.Conn, mode string, s postgres.Statement) string {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	sd, err := conn.Prepare(ctx, "console_query", s.SQL)
	if err != nil {
		t.Fatalf("prepare %s: %v", s.SQL, err)
	}
	defer conn.Deallocate(ctx, "console_query")
	lits := make([]string, len(s.Args))
	for i, a := range s.Args {
		buf, err := conn.TypeMap().Encode(sd.ParamOIDs[i], pgtype.TextFormatCode, a, nil)
		if err != nil {
			t.Fatalf("argument $%d (%v) of %s: %v", i+1, a, s.SQL, err)
		}
		lits[i] = "NULL"
		if buf != nil {
			lits[i] = "'" + strings.ReplaceAll(string(buf), "'", "''") + "'"
		}
	}
	sql := "EXPLAIN (FORMAT JSON) EXECUTE console_query"
	if len(lits) > 0 {
		sql += "(" + strings.Join(lits, ", ") + ")"
	}
	var plan string
	if err := conn.QueryRow(ctx, sql).Scan(&plan); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return plan
}

// scan is one node of a plan that reads a table or an index.
type scan struct {
	node, relation, index string
}

// scansOf walks a JSON plan (subplans and CTEs included) and returns
// its scans.
func scansOf(t *testing.T, plan string) []scan {
	t.Helper()
	var top []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &top); err != nil || len(top) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var out []scan
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		typ, _ := n["Node Type"].(string)
		rel, _ := n["Relation Name"].(string)
		idx, _ := n["Index Name"].(string)
		if strings.Contains(typ, "Scan") && (rel != "" || idx != "") {
			out = append(out, scan{typ, rel, idx})
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(top[0].Plan)
	return out
}

// summary is "Index Scan Backward messages_pkey, …".
func summary(scans []scan) string {
	var parts []string
	for _, s := range scans {
		what := s.index
		if what == "" {
			what = s.relation
		}
		parts = append(parts, s.node+" "+what)
	}
	return strings.Join(parts, ", ")
}

// BenchmarkConsoleQueries times each console read on a database of a
// million messages (pgfill) and reports its median and 95th percentile
// in milliseconds (p50-ms, p95-ms): go test -run '^$' -bench
// ConsoleQueries ./internal/postgres/.
func BenchmarkConsoleQueries(b *testing.B) {
	ctx := context.Background()
	url, d := pgfill.Shared(b)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for _, q := range d.Queries() {
		b.Run(q.Name, func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				t := time.Now()
				if err := q.Run(ctx, st); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			p50, p95 := percentile(lat, 50), percentile(lat, 95)
			b.ReportMetric(ms(p50), "p50-ms")
			b.ReportMetric(ms(p95), "p95-ms")
		})
	}
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
