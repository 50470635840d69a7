package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The demo exchange's documents are whole X12 interchanges (ISA, GS, ST…SE,
// GE, IEA with matching counts and control numbers), so that the hub and
// the demo partner accept them and answer with a 997 rather than a TA1
// rejection, and each start of the stack gives them control numbers no
// start gave before: the duplicate-interchange check would flag the same
// numbers again.

// The AS2 IDs of the hub's station and the demo partner, as the stack's
// config files name them; the demo documents use them as X12 IDs too.
const (
	hubAS2ID  = "EDIHUB"
	demoAS2ID = "DEMO PARTNER"
)

// demoDoc is one document of the demo exchange.
type demoDoc struct {
	Path    string
	From    string // the sender's AS2 ID (and X12 sender ID)
	To      string
	Control int64 // ISA13 and GS06
}

// controlFile keeps, in the samples directory, the next interchange
// control number the demo exchange may use.
const controlFile = "next-control-number"

// controlEpoch is where the time-derived floor of the control numbers
// starts: seconds since then fit ISA13's nine digits until 2051.
var controlEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// maxControl is the largest X12 interchange control number.
const maxControl = 999999999

// reserveControlNumbers takes n consecutive control numbers and returns
// the first. It keeps the next one in dir/next-control-number and never
// goes below the seconds since controlEpoch at now, so the numbers differ
// from every earlier start's also when the file was removed. Past nine
// digits it starts again at 1.
func reserveControlNumbers(dir string, n int, now time.Time) (int64, error) {
	path := filepath.Join(dir, controlFile)
	next := int64(now.Sub(controlEpoch) / time.Second)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		stored, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if perr != nil {
			return 0, fmt.Errorf("control number in %s: %w", path, perr)
		}
		next = max(next, stored)
	case !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("read control number: %w", err)
	}
	if next < 1 || next+int64(n)-1 > maxControl {
		next = 1
	}
	if err := os.WriteFile(path, []byte(strconv.FormatInt(next+int64(n), 10)+"\n"), 0o644); err != nil {
		return 0, fmt.Errorf("write control number: %w", err)
	}
	return next, nil
}

// demoOrder is an X12 850 purchase order from one party to the other in
// interchange ctl (also its group's control number), dated now.
func demoOrder(from, to string, ctl int64, now time.Time) []byte {
	var b strings.Builder
	seg := func(elems ...string) { b.WriteString(strings.Join(elems, "*") + "~\n") }
	seg("ISA", "00", "          ", "00", "          ", "ZZ", fmt.Sprintf("%-15s", from), "ZZ", fmt.Sprintf("%-15s", to),
		now.Format("060102"), now.Format("1504"), "U", "00401", fmt.Sprintf("%09d", ctl), "0", "T", ">")
	seg("GS", "PO", from, to, now.Format("20060102"), now.Format("1504"), strconv.FormatInt(ctl, 10), "X", "004010")
	// The set's segments, ST and SE included, are what SE01 counts.
	set := [][]string{
		{"ST", "850", "0001"},
		{"BEG", "00", "SA", "PO-" + strconv.FormatInt(ctl, 10), "", now.Format("20060102")},
		{"PO1", "1", "12", "EA", "9.95", "", "BP", "WIDGET-A"},
		{"CTT", "1"},
	}
	for _, s := range set {
		seg(s...)
	}
	seg("SE", strconv.Itoa(len(set)+1), "0001")
	seg("GE", "1", strconv.FormatInt(ctl, 10))
	seg("IEA", "1", fmt.Sprintf("%09d", ctl))
	return []byte(b.String())
}

// writeDemoDocuments writes the demo exchange's documents into dir: count
// from the hub to the demo partner and count back, in turn, each with
// control numbers of its own reserved for this start.
func writeDemoDocuments(dir string, count int, now time.Time) ([]demoDoc, error) {
	first, err := reserveControlNumbers(dir, 2*count, now)
	if err != nil {
		return nil, err
	}
	var docs []demoDoc
	for i := range 2 * count {
		d := demoDoc{From: hubAS2ID, To: demoAS2ID, Control: first + int64(i)}
		if i%2 == 1 {
			d.From, d.To = demoAS2ID, hubAS2ID
		}
		d.Path = filepath.Join(dir, fmt.Sprintf("order-%d.x12", i+1))
		if err := os.WriteFile(d.Path, demoOrder(d.From, d.To, d.Control, now), 0o644); err != nil {
			return nil, fmt.Errorf("write demo document: %w", err)
		}
		docs = append(docs, d)
	}
	return docs, nil
}
