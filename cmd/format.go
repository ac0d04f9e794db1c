package cmd

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// oneLine keeps a message on one line whatever it quotes.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\n\r") {
		s = strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(s)
	}
	// What the message quotes (a host, a path, a key another host wrote
	// into a shared ledger) may hold a terminal's escapes.
	return escapeControls(s, false)
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// age renders a duration for people: 45s, 4m, 3h, 2d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = fmt.Sprintf("%q", s)
	}
	s := strings.Join(q, " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// timeFormat is RFC 3339 in UTC with milliseconds, the ledger's precision.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func bytesNote(n int, truncated bool) string {
	s := fmt.Sprintf("%d bytes", n)
	if n == 1 {
		s = "1 byte"
	}
	if truncated {
		s += " (truncated)"
	}
	return s
}

// stamp renders a time for people: RFC 3339 UTC and how far from now.
func stamp(t, now time.Time) string {
	d := now.Sub(t)
	rel := age(d) + " ago"
	if d < 0 {
		rel = "in " + age(-d)
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(timeFormat), rel)
}

// span renders a duration compactly: 12ms, 1.5s, 4m3s, 2h5m, 3d4h.
func span(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return twoUnits(int(d.Minutes()), "m", int(d.Seconds())%60, "s")
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return twoUnits(int(d.Hours()), "h", int(d.Minutes())%60, "m")
	}
	d = d.Round(time.Hour)
	return twoUnits(int(d.Hours())/24, "d", int(d.Hours())%24, "h")
}

// twoUnits renders "4m3s", or "4m" when the smaller unit is zero.
func twoUnits(big int, bigUnit string, small int, smallUnit string) string {
	if small == 0 {
		return strconv.Itoa(big) + bigUnit
	}
	return strconv.Itoa(big) + bigUnit + strconv.Itoa(small) + smallUnit
}

// writeTable prints rows with columns padded to their widest cell; paint,
// when set, may decorate a cell after its width was measured.
func writeTable(w io.Writer, rows [][]string, paint func(row, col int, cell string) string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(cell))
		}
	}
	var b strings.Builder
	for r, row := range rows {
		b.Reset()
		for i, cell := range row {
			pad := widths[i] - len(cell)
			if paint != nil {
				cell = paint(r, i, cell)
			}
			b.WriteString(cell)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", pad+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(w, b.String())
	}
}

func records(n int) string {
	if n == 1 {
		return "1 record"
	}
	return fmt.Sprintf("%d records", n)
}

// size renders a byte count: 512 B, 1.5 KiB, 76.2 MiB.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
