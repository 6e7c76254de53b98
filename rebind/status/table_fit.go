package status

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Width is the width `nvmet-rebind status` fits its table in.
const Width = 120

// minText is the narrowest the REASON column gets beside a row; when less
// is left, each reason goes under its row instead.
const minText = 30

// fitColumns are the columns of the fitted table, before REASON. The
// devices, the sharers and the netdev are shown by -o wide and
// `status <id>` (a stranded listener's reason names both devices).
var fitColumns = []string{"KIND", "ID", "ADDRESS", "STATE", "MANAGED", "LAST ACTION", "RETRY"}

const fitID = 1 // the index of ID in fitColumns

// minColumns are the columns never folded: KIND, ID, ADDRESS, STATE.
const minColumns = 4

// WriteFitted prints the report as `nvmet-rebind status` shows it, in
// width columns (Width). What every row says (the same reason, or the
// cm_id table's error) is said once above the table and left out of the
// rows. A reason too long for the REASON column wraps under itself in
// that column; when the row leaves that column too narrow, each reason
// goes on indented lines under its row. An id too long for its column is
// alone on its row's first line, as df(1) does with a long file system
// name; only an id longer than the whole line passes the width, never
// cut. Names and texts are rendered safely, as WriteTable renders them.
func WriteFitted(out io.Writer, r StatusReport, width int) error {
	var b strings.Builder
	above, texts := sharedConditions(r)
	for _, a := range above {
		writeWrapped(&b, a, "", "  ", width)
	}
	if len(above) > 0 {
		b.WriteString("\n")
	}
	rows := make([][]string, len(r.Listeners))
	for i, l := range r.Listeners {
		rows[i] = fitCells(l)
	}
	writeFittedRows(&b, rows, texts, width)
	fmt.Fprintf(&b, "\n(source: %s)\n", escape(r.Source))
	writeTrailer(&b, r)
	_, err := io.WriteString(out, b.String())
	return err
}

// writeFittedRows lays out the header and rows, each with its text. When
// the columns after STATE leave no room for an id (an IPv6 address, a
// long action), the last of them are folded into the text ("retry: in
// 2s"), for every row alike.
func writeFittedRows(b *strings.Builder, rows [][]string, texts []string, width int) {
	w := make([]int, len(fitColumns))
	for i, h := range fitColumns {
		w[i] = utf8.RuneCountInString(h)
		for _, row := range rows {
			if i != fitID {
				w[i] = max(w[i], utf8.RuneCountInString(row[i]))
			}
		}
	}
	cols, other := len(fitColumns), 0
	for ; ; cols-- {
		other = 0
		for i, n := range w[:cols] {
			if i != fitID {
				other += n + 2
			}
		}
		if cols == minColumns || other+len("ID")+2 <= width {
			break
		}
	}
	w = w[:cols]
	idCap := max(w[fitID], width-other-2-minText)
	for _, row := range rows {
		if n := utf8.RuneCountInString(row[fitID]); n <= idCap {
			w[fitID] = max(w[fitID], n)
		}
	}
	textAt := other + w[fitID] + 2 // where the REASON column starts
	beside := width-textAt >= minText
	texts = slices.Clone(texts)
	for i, row := range rows {
		for c := cols; c < len(fitColumns); c++ {
			if row[c] != "-" {
				texts[i] = strings.TrimPrefix(texts[i]+"; "+strings.ToLower(fitColumns[c])+": "+row[c], "; ")
			}
		}
	}
	header := slices.Clone(fitColumns[:cols])
	if beside && slices.ContainsFunc(texts, func(t string) bool { return t != "" }) {
		header = append(header, "REASON") // not over a column every row left empty
	}
	writeCells(b, header, w)
	for i, row := range rows {
		text := texts[i]
		row = slices.Clone(row[:cols])
		if utf8.RuneCountInString(row[fitID]) > w[fitID] {
			writeCells(b, row[:fitID+1], nil) // the long id alone
			row[0], row[fitID] = "", ""
		}
		if !beside {
			writeCells(b, row, w)
			writeWrapped(b, text, "    ", "    ", width)
			continue
		}
		lines := wrap(text, width-textAt)
		if len(lines) == 0 {
			lines = []string{""}
		}
		writeCells(b, append(row, lines[0]), w)
		for _, l := range lines[1:] {
			b.WriteString(strings.Repeat(" ", textAt) + l + "\n")
		}
	}
}

// writeCells writes one line of cells, each padded to its width but the
// last (widths nil: separated by two spaces), without trailing blanks.
func writeCells(b *strings.Builder, cells []string, widths []int) {
	var line strings.Builder
	for i, c := range cells {
		line.WriteString(c)
		if i < len(cells)-1 {
			pad := 2
			if widths != nil {
				pad += widths[i] - utf8.RuneCountInString(c)
			}
			line.WriteString(strings.Repeat(" ", pad))
		}
	}
	b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
}

// fitCells are the cells of one row of the fitted table: the LAST ACTION
// says ok or failed (the error follows the reason, fitText).
func fitCells(l ListenerStatus) []string {
	addr := l.Address
	if l.Service != "" {
		addr = net.JoinHostPort(l.Address, l.Service)
	}
	last := "-"
	if l.LastAction != "" {
		res := "failed"
		if l.LastResult == "ok" {
			res = "ok"
		}
		last = l.LastAction + ": " + res
		if l.LastAt != nil {
			last += " (" + l.LastAt.Local().Format(time.TimeOnly) + ")"
		}
	}
	retry := "-"
	if l.RetryAt != nil {
		retry = "in " + time.Until(*l.RetryAt).Round(time.Millisecond).String()
	}
	kind := l.Kind
	if l.Transport == "tcp" {
		kind += "-tcp"
	}
	return []string{quoteName(kind), quoteName(l.ID), dash(escape(addr)), dash(escape(l.State)), yesNo(l.Managed), escape(last), retry}
}

// sharedConditions returns what is said once above the fitted table, and
// each row's text without it: the cm_id table's error (said where a row
// reads "listener state unknown: <error>"), then the parts of the reasons
// ("; "-separated) that every row has, when there are two rows or more.
// A failed last action's error follows its row's reason.
func sharedConditions(r StatusReport) ([]string, []string) {
	texts := make([]string, len(r.Listeners))
	var above []string
	affected := 0
	for i, l := range r.Listeners {
		t := l.Reason
		if e := r.ListenersError; e != "" && strings.Contains(t, e) {
			affected++
			t = strings.ReplaceAll(strings.ReplaceAll(t, ": "+e, ""), e, "(see above)")
		}
		texts[i] = t
	}
	switch {
	case r.ListenersError != "" && affected > 0:
		above = append(above, fmt.Sprintf("listening is unknown (%d of %d rows): %s", affected, len(r.Listeners), escape(r.ListenersError)))
	case r.ListenersError != "":
		above = append(above, "RDMA listeners cannot be read (no row here needs them): "+escape(r.ListenersError))
	}
	if len(texts) >= 2 {
		parts := make([][]string, len(texts))
		for i, t := range texts {
			parts[i] = splitReason(t)
		}
		var common []string
		for _, p := range parts[0] {
			every := !slices.Contains(common, p)
			for _, q := range parts[1:] {
				every = every && slices.Contains(q, p)
			}
			if every {
				common = append(common, p)
			}
		}
		for _, c := range common {
			above = append(above, fmt.Sprintf("all %d rows: %s", len(texts), escape(c)))
		}
		if len(common) > 0 {
			for i, p := range parts {
				texts[i] = strings.Join(slices.DeleteFunc(p, func(s string) bool { return slices.Contains(common, s) }), "; ")
			}
		}
	}
	for i, l := range r.Listeners {
		t := escape(texts[i])
		if l.LastAction != "" && l.LastResult != "ok" && l.LastResult != "" {
			f := "last " + escape(l.LastAction) + " failed: " + escape(l.LastResult)
			t = strings.TrimPrefix(t+"; "+f, "; ")
		}
		texts[i] = t
	}
	return above, texts
}

// splitReason splits a reason into the parts plan joined with "; ".
func splitReason(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "; ")
}

// writeWrapped writes s wrapped in width columns, its first line after
// first, the others after indent.
func writeWrapped(b *strings.Builder, s, first, indent string, width int) {
	for i, l := range wrap(s, width-utf8.RuneCountInString(indent)) {
		if i == 0 {
			b.WriteString(first + l + "\n")
		} else {
			b.WriteString(indent + l + "\n")
		}
	}
}

// wrap breaks s into lines of at most width runes, between words where it
// can, inside a word longer than a line where it must.
func wrap(s string, width int) []string {
	width = max(width, 1)
	var lines []string
	var line []rune
	for _, word := range strings.Fields(s) {
		wr := []rune(word)
		if len(line) > 0 && len(line)+1+len(wr) > width {
			lines, line = append(lines, string(line)), nil
		}
		if len(line) > 0 {
			line = append(line, ' ')
		}
		for len(line)+len(wr) > width {
			n := width - len(line)
			lines, line, wr = append(lines, string(append(line, wr[:n]...))), nil, wr[n:]
		}
		line = append(line, wr...)
	}
	if len(line) > 0 {
		lines = append(lines, string(line))
	}
	return lines
}
