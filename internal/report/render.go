package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// unit says how a figure is formatted.
type unit int

const (
	count unit = iota
	byteCount
	secs
)

// figure is one row of the report's tables.
type figure struct {
	key, label string
	unit       unit
	// better is +1 when more is good, -1 when less is, 0 when neither.
	better int
	get    func(*Hub) (float64, bool)
}

func fig(key, label string, u unit, better int, get func(*Figures) int64) figure {
	return figure{key, label, u, better, func(h *Hub) (float64, bool) { return float64(get(&h.Figures)), true }}
}

func latency(key, label string, get func(*Figures) *float64) figure {
	return figure{key, label, secs, -1, func(h *Hub) (float64, bool) {
		if v := get(&h.Figures); v != nil {
			return *v, true
		}
		return 0, false
	}}
}

func hubFig(key, label string, better int, get func(*Hub) int64) figure {
	return figure{key, label, count, better, func(h *Hub) (float64, bool) { return float64(get(h)), true }}
}

// partnerFigures are the figures of every partner row (and of the hub).
var partnerFigures = []figure{
	fig("received", "Documents received", count, 0, func(f *Figures) int64 { return f.Received }),
	fig("received_bytes", "Bytes received", byteCount, 0, func(f *Figures) int64 { return f.ReceivedBytes }),
	fig("refused", "Refused (error MDN answered)", count, -1, func(f *Figures) int64 { return f.Refused }),
	fig("sent", "Documents sent", count, 0, func(f *Figures) int64 { return f.Sent }),
	fig("sent_bytes", "Bytes sent", byteCount, 0, func(f *Figures) int64 { return f.SentBytes }),
	fig("delivered", "Delivered (positive MDN)", count, +1, func(f *Figures) int64 { return f.Delivered }),
	fig("accepted_without_mdn", "Accepted, no MDN requested", count, 0, func(f *Figures) int64 { return f.Accepted }),
	fig("failed", "Failed", count, -1, func(f *Figures) int64 { return f.Failed }),
	fig("queued", "Not yet accepted (queued, retrying)", count, -1, func(f *Figures) int64 { return f.Queued }),
	fig("pending_mdn", "MDN pending", count, -1, func(f *Figures) int64 { return f.PendingMDN }),
	fig("overdue_mdn", "MDN overdue", count, -1, func(f *Figures) int64 { return f.OverdueMDN }),
	fig("duplicates", "Duplicates answered", count, -1, func(f *Figures) int64 { return f.Duplicates }),
	latency("mdn_latency_p50_seconds", "MDN latency p50", func(f *Figures) *float64 { return f.LatencyP50 }),
	latency("mdn_latency_p95_seconds", "MDN latency p95", func(f *Figures) *float64 { return f.LatencyP95 }),
	fig("send_retries", "Send retries", count, -1, func(f *Figures) int64 { return f.Retries }),
	fig("interchanges_sent", "EDI interchanges sent", count, 0, func(f *Figures) int64 { return f.InterchangesSent }),
	fig("acks_accepted", "Acknowledged: accepted", count, +1, func(f *Figures) int64 { return f.AcksAccepted }),
	fig("acks_accepted_with_errors", "Acknowledged: accepted with errors", count, -1, func(f *Figures) int64 { return f.AcksWithErrors }),
	fig("acks_rejected", "Acknowledged: rejected", count, -1, func(f *Figures) int64 { return f.AcksRejected }),
	fig("acks_overdue", "Acknowledgement overdue", count, -1, func(f *Figures) int64 { return f.AcksOverdue }),
	fig("duplicate_interchanges", "Duplicate interchanges received", count, -1, func(f *Figures) int64 { return f.DuplicateInterchanges }),
}

// hubFigures are the rows only the hub has.
var hubFigures = []figure{
	hubFig("leader_terms", "Leadership terms opened", -1, func(h *Hub) int64 { return h.Terms }),
	hubFig("failovers", "Failovers", -1, func(h *Hub) int64 { return h.Failovers }),
	hubFig("fencing_rejections", "Fencing rejections", -1, func(h *Hub) int64 { return h.FencingRejections }),
	hubFig("backlog_outbound", "Outbound unfinished at end of day", -1, func(h *Hub) int64 { return h.BacklogOutbound }),
	hubFig("backlog_mdn_inbox", "Async MDNs unprocessed at end of day", -1, func(h *Hub) int64 { return h.BacklogMDNInbox }),
}

// partnerColumns are the figures of the HTML and text partner tables (the
// CSV has them all).
var partnerColumns = []string{"received", "sent", "delivered", "failed", "refused", "pending_mdn", "overdue_mdn", "duplicates", "send_retries", "mdn_latency_p50_seconds", "mdn_latency_p95_seconds"}

var shortLabels = map[string]string{
	"received": "In", "sent": "Out", "delivered": "Delivered", "failed": "Failed", "refused": "Refused",
	"pending_mdn": "MDN pending", "overdue_mdn": "MDN overdue", "duplicates": "Dupl.", "send_retries": "Retries",
	"mdn_latency_p50_seconds": "MDN p50", "mdn_latency_p95_seconds": "MDN p95",
}

func figureByKey(key string) figure {
	for _, f := range partnerFigures {
		if f.key == key {
			return f
		}
	}
	panic("report: no figure " + key)
}

func format(u unit, v float64, ok bool) string {
	if !ok {
		return "–"
	}
	switch u {
	case byteCount:
		return formatBytes(v)
	case secs:
		return formatSeconds(v)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func formatBytes(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return fmt.Sprintf("%.1f GB", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.1f MB", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%.0f B", v)
}

func formatSeconds(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 3600:
		return fmt.Sprintf("%.1f h", v/3600)
	case a >= 60:
		return fmt.Sprintf("%.1f min", v/60)
	}
	return fmt.Sprintf("%.1f s", v)
}

// change describes cur against prev: "+3 (+12%)", "−2 (−50%)", "±0",
// "new" or "–" when either is missing.
type change struct {
	Text string
	// Tone is good, bad or "" (neutral).
	Tone string
}

func compare(f figure, cur, prev *Hub) change {
	c, okc := f.get(cur)
	p, okp := f.get(prev)
	if !okc || !okp {
		return change{Text: "–"}
	}
	d := c - p
	if d == 0 || (f.unit == secs && math.Abs(d) < 0.05) {
		return change{Text: "±0"}
	}
	sign := "+"
	if d < 0 {
		sign = "−"
	}
	text := sign + strings.TrimPrefix(format(f.unit, math.Abs(d), true), "-")
	if p != 0 {
		text += fmt.Sprintf(" (%s%.0f%%)", sign, math.Abs(d)/p*100)
	} else {
		text += " (new)"
	}
	tone := ""
	if f.better != 0 {
		if (d > 0) == (f.better > 0) {
			tone = "good"
		} else {
			tone = "bad"
		}
	}
	return change{Text: text, Tone: tone}
}

func asHub(f Figures) *Hub { return &Hub{Figures: f} }

// row is a rendered table row.
type row struct {
	Label, Value string
	Day, Week    change
}

func hubRows(r *Report, figs []figure) []row {
	var rows []row
	for _, f := range figs {
		v, ok := f.get(&r.Hub)
		rows = append(rows, row{Label: f.label, Value: format(f.unit, v, ok),
			Day: compare(f, &r.Hub, &r.DayBefore.Hub), Week: compare(f, &r.Hub, &r.WeekBefore.Hub)})
	}
	return rows
}

// cell is a partner table cell.
type cell struct {
	Value string
	Day   change
}

type partnerRow struct {
	Name  string
	Cells []cell
}

func partnerRows(r *Report) []partnerRow {
	var rows []partnerRow
	for _, q := range r.Partners {
		pr := partnerRow{Name: q.Name}
		if q.Station != "" {
			pr.Name += " → " + q.Station
		}
		cur, prev := asHub(q.Figures), asHub(r.DayBefore.Partner(q.Name))
		for _, key := range partnerColumns {
			f := figureByKey(key)
			v, ok := f.get(cur)
			pr.Cells = append(pr.Cells, cell{Value: format(f.unit, v, ok), Day: compare(f, cur, prev)})
		}
		rows = append(rows, pr)
	}
	return rows
}

func kindRows(r *Report) []row {
	kinds := map[string]bool{}
	for _, p := range []*Period{&r.Period, &r.DayBefore, &r.WeekBefore} {
		for k := range p.Hub.FailuresByKind {
			kinds[k] = true
		}
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	var rows []row
	for _, k := range names {
		f := hubFig(k, k, -1, func(h *Hub) int64 { return h.FailuresByKind[k] })
		v, _ := f.get(&r.Hub)
		rows = append(rows, row{Label: k, Value: format(count, v, true),
			Day: compare(f, &r.Hub, &r.DayBefore.Hub), Week: compare(f, &r.Hub, &r.WeekBefore.Hub)})
	}
	return rows
}

// Title is the report's title line (also the mail subject).
func (r *Report) Title() string {
	t := fmt.Sprintf("edihub daily report %s: %s", r.Station, r.longDay())
	if r.Preliminary {
		t += " (preliminary)"
	}
	return t
}

func (r *Report) longDay() string {
	return r.Start.In(r.location()).Format("Monday 2 January 2006")
}

func (r *Report) location() *time.Location {
	if loc, err := time.LoadLocation(r.TimeZone); err == nil {
		return loc
	}
	return time.UTC
}

// Summary is the report's one-sentence summary.
func (r *Report) Summary() string {
	if r.Empty() {
		return fmt.Sprintf("No documents were received or sent on %s (%s).", r.longDay(), r.TimeZone)
	}
	h := r.Hub
	s := fmt.Sprintf("%d documents received (%d refused) and %d sent: %d delivered, %d failed",
		h.Received, h.Refused, h.Sent, h.Delivered, h.Failed)
	if h.PendingMDN+h.OverdueMDN > 0 {
		s += fmt.Sprintf(", %d awaiting an MDN (%d overdue)", h.PendingMDN+h.OverdueMDN, h.OverdueMDN)
	}
	if h.Queued > 0 {
		s += fmt.Sprintf(", %d not yet accepted", h.Queued)
	}
	return s + "."
}

// Images are the chart sources the HTML refers to: "cid:..." in a mail,
// data: URIs or file names elsewhere. Empty: no image.
type Images struct {
	Volume, Partners string
}

// Content-IDs of the charts in the mail.
const (
	VolumeCID   = "volume.png"
	PartnersCID = "partners.png"
)

// HTML renders the report as one HTML document with inline CSS and no
// external resources: the charts come from img, which the caller points
// at inline parts or data: URIs.
func HTML(r *Report, img Images) ([]byte, error) {
	data := struct {
		R                     *Report
		Title, Summary, Day   string
		Generated             string
		Hub, Kinds, HubOnly   []row
		Partners              []partnerRow
		Columns               []string
		VolumeSrc, PartnerSrc template.URL
	}{
		R: r, Title: r.Title(), Summary: r.Summary(), Day: r.longDay(),
		Generated: r.GeneratedAt.In(r.location()).Format("2006-01-02 15:04 MST"),
		Hub:       hubRows(r, partnerFigures), Kinds: kindRows(r), HubOnly: hubRows(r, hubFigures),
		Partners: partnerRows(r),
		// The sources are ours (cid: and data: URIs), not user input.
		VolumeSrc: template.URL(img.Volume), PartnerSrc: template.URL(img.Partners),
	}
	for _, k := range partnerColumns {
		data.Columns = append(data.Columns, shortLabels[k])
	}
	var buf bytes.Buffer
	if err := htmlTemplate.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render HTML: %w", err)
	}
	return buf.Bytes(), nil
}

var htmlTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"tone": func(c change) template.CSS {
		switch c.Tone {
		case "good":
			return "color:#15803d"
		case "bad":
			return "color:#b91c1c"
		}
		return "color:#6b7280"
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
</head>
<body style="margin:0;padding:0;background:#f3f4f6;font-family:Helvetica,Arial,sans-serif;color:#111827;">
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" style="background:#f3f4f6;">
<tr><td align="center" style="padding:16px;">
<table role="presentation" width="760" cellpadding="0" cellspacing="0" style="max-width:760px;background:#ffffff;border:1px solid #e5e7eb;">
<tr><td style="padding:20px 24px;background:#1e3a8a;color:#ffffff;">
<div style="font-size:13px;letter-spacing:1px;text-transform:uppercase;opacity:0.8;">edihub end-of-day report{{if .R.Preliminary}} · preliminary{{end}}</div>
<div style="font-size:22px;font-weight:bold;margin-top:4px;">{{.R.Station}} · {{.Day}}</div>
<div style="font-size:13px;margin-top:4px;opacity:0.8;">{{.R.TimeZone}} · {{.R.Day}} · {{len .R.Hours}} hours</div>
</td></tr>
<tr><td style="padding:20px 24px 8px 24px;font-size:16px;line-height:1.5;">{{.Summary}}</td></tr>
{{if .R.Empty}}
<tr><td style="padding:8px 24px 20px 24px;font-size:14px;color:#374151;">
The hub was {{if .R.Hub.Terms}}running ({{.R.Hub.Terms}} leadership terms opened){{else}}quiet{{end}}; {{.R.Hub.BacklogOutbound}} outbound messages were unfinished and {{.R.Hub.BacklogMDNInbox}} async MDNs unprocessed at the end of the day.
</td></tr>
{{else}}
<tr><td style="padding:8px 24px;">
<table width="100%" cellpadding="6" cellspacing="0" style="border-collapse:collapse;font-size:14px;">
<tr style="background:#f9fafb;text-align:left;"><th style="border-bottom:2px solid #e5e7eb;">Hub</th><th style="border-bottom:2px solid #e5e7eb;text-align:right;">{{.R.Day}}</th><th style="border-bottom:2px solid #e5e7eb;text-align:right;">vs day before</th><th style="border-bottom:2px solid #e5e7eb;text-align:right;">vs a week before</th></tr>
{{range .Hub}}<tr><td style="border-bottom:1px solid #f3f4f6;">{{.Label}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;font-weight:bold;">{{.Value}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;{{tone .Day}}">{{.Day.Text}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;{{tone .Week}}">{{.Week.Text}}</td></tr>
{{end}}</table>
</td></tr>
{{if .VolumeSrc}}<tr><td style="padding:12px 24px;"><img src="{{.VolumeSrc}}" width="712" alt="Documents received and sent per hour" style="display:block;width:100%;max-width:712px;height:auto;border:0;"></td></tr>{{end}}
{{if .Kinds}}<tr><td style="padding:8px 24px;">
<div style="font-size:16px;font-weight:bold;margin:8px 0;">Failures by disposition</div>
<table width="100%" cellpadding="6" cellspacing="0" style="border-collapse:collapse;font-size:14px;">
{{range .Kinds}}<tr><td style="border-bottom:1px solid #f3f4f6;font-family:Menlo,Consolas,monospace;">{{.Label}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;font-weight:bold;">{{.Value}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;{{tone .Day}}">{{.Day.Text}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;{{tone .Week}}">{{.Week.Text}}</td></tr>
{{end}}</table>
</td></tr>{{end}}
<tr><td style="padding:8px 24px;">
<div style="font-size:16px;font-weight:bold;margin:8px 0;">Partners <span style="font-weight:normal;font-size:12px;color:#6b7280;">(change against the day before below each figure)</span></div>
<table width="100%" cellpadding="4" cellspacing="0" style="border-collapse:collapse;font-size:13px;">
<tr style="background:#f9fafb;"><th style="text-align:left;border-bottom:2px solid #e5e7eb;">Partner</th>{{range .Columns}}<th style="text-align:right;border-bottom:2px solid #e5e7eb;">{{.}}</th>{{end}}</tr>
{{range .Partners}}<tr><td style="border-bottom:1px solid #f3f4f6;font-weight:bold;">{{.Name}}</td>{{range .Cells}}<td style="border-bottom:1px solid #f3f4f6;text-align:right;">{{.Value}}<br><span style="font-size:11px;{{tone .Day}}">{{.Day.Text}}</span></td>{{end}}</tr>
{{end}}</table>
</td></tr>
{{if .PartnerSrc}}<tr><td style="padding:12px 24px;"><img src="{{.PartnerSrc}}" width="712" alt="Documents through and failed per partner" style="display:block;width:100%;max-width:712px;height:auto;border:0;"></td></tr>{{end}}
{{end}}
<tr><td style="padding:8px 24px;">
<div style="font-size:16px;font-weight:bold;margin:8px 0;">Operations</div>
<table width="100%" cellpadding="6" cellspacing="0" style="border-collapse:collapse;font-size:14px;">
{{range .HubOnly}}<tr><td style="border-bottom:1px solid #f3f4f6;">{{.Label}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;font-weight:bold;">{{.Value}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;{{tone .Day}}">{{.Day.Text}}</td><td style="border-bottom:1px solid #f3f4f6;text-align:right;{{tone .Week}}">{{.Week.Text}}</td></tr>
{{end}}</table>
</td></tr>
<tr><td style="padding:16px 24px 20px 24px;font-size:12px;color:#6b7280;line-height:1.5;">
Documents are counted on the day they were received or submitted, with the outcome they had when the report was generated ({{.Generated}}). MDN latency runs from submission to the MDN that settled the message. The per-partner table is attached as CSV.
</td></tr>
</table>
</td></tr>
</table>
</body>
</html>
`))

// Text renders the report as plain text, the mail's alternative part.
func Text(r *Report) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n%s\n\n%s\n\n", r.Title(), strings.Repeat("=", len([]rune(r.Title()))), r.Summary())
	fmt.Fprintf(&b, "Time zone %s, %d hours, generated %s.\n\n", r.TimeZone, len(r.Hours), r.GeneratedAt.In(r.location()).Format("2006-01-02 15:04 MST"))
	table := func(title string, rows []row) {
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s\n\n", title)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\t%s\tvs day before\tvs week before\t\n", r.Day)
		for _, x := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", x.Label, x.Value, x.Day.Text, x.Week.Text)
		}
		_ = tw.Flush()
		b.WriteString("\n")
	}
	if !r.Empty() {
		table("Hub", hubRows(r, partnerFigures))
		table("Failures by disposition", kindRows(r))
		b.WriteString("Partners (change against the day before in brackets)\n")
		for _, pr := range partnerRows(r) {
			fmt.Fprintf(&b, "\n%s\n", pr.Name)
			const indent = "  "
			line := indent
			for i, c := range pr.Cells {
				item := fmt.Sprintf("%s %s [%s]", shortLabels[partnerColumns[i]], c.Value, c.Day.Text)
				if line != indent {
					if len([]rune(line))+3+len([]rune(item)) > 76 {
						b.WriteString(line + "\n")
						line = indent
					} else {
						line += " · "
					}
				}
				line += item
			}
			b.WriteString(line + "\n")
		}
		b.WriteString("\nDocuments per hour (received / sent)\n\n")
		for _, h := range r.Hours {
			line := fmt.Sprintf("  %-10s %4d / %-4d %s", h.Label, h.In, h.Out, strings.Repeat("#", int(min(h.In+h.Out, 60))))
			b.WriteString(strings.TrimRight(line, " ") + "\n")
		}
		b.WriteString("\n")
	}
	table("Operations", hubRows(r, hubFigures))
	b.WriteString("Documents are counted on the day they were received or submitted, with the\noutcome they had when the report was generated. MDN latency runs from\nsubmission to the MDN that settled the message.\n")
	return b.Bytes()
}

// CSV renders the per-partner table, one row per partner and a last row
// "(all partners)": every figure, then its change against the day before
// and the week before (signed differences; empty when not comparable).
func CSV(r *Report) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	head := []string{"day", "partner"}
	for _, f := range partnerFigures {
		head = append(head, f.key, f.key+"_vs_day_before", f.key+"_vs_week_before")
	}
	_ = w.Write(head)
	line := func(name string, cur, day, week *Hub) {
		rec := []string{r.Day, name}
		for _, f := range partnerFigures {
			v, ok := f.get(cur)
			rec = append(rec, csvNumber(v, ok))
			for _, prev := range []*Hub{day, week} {
				p, okp := f.get(prev)
				rec = append(rec, csvNumber(v-p, ok && okp))
			}
		}
		_ = w.Write(rec)
	}
	for _, q := range r.Partners {
		name := q.Name
		if q.Station != "" {
			name += " → " + q.Station
		}
		line(name, asHub(q.Figures), asHub(r.DayBefore.Partner(q.Name)), asHub(r.WeekBefore.Partner(q.Name)))
	}
	line("(all partners)", &r.Hub, &r.DayBefore.Hub, &r.WeekBefore.Hub)
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("render CSV: %w", err)
	}
	return b.Bytes(), nil
}

func csvNumber(v float64, ok bool) string {
	if !ok {
		return ""
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

// JSON renders the report's figures (the form stored in reports.figures).
func JSON(r *Report) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render JSON: %w", err)
	}
	return append(b, '\n'), nil
}

// FromJSON reads a report stored by JSON.
func FromJSON(b []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read stored report: %w", err)
	}
	if r.Version != FormatVersion {
		return nil, fmt.Errorf("read stored report: format version %d, want %d", r.Version, FormatVersion)
	}
	return &r, nil
}
