// Package mdtable finds the Markdown table under a heading of a document
// and checks it against a table the code makes, so that the docs'
// option tables cannot drift from the option tables they document. A
// leaf, used by tests.
package mdtable

import (
	"fmt"
	"os"
	"strings"
)

// Find returns the byte range of the first table after the line heading
// (a whole line, such as "### Driver options"): from its first row to the
// end of its last, a row being a line that starts with "|".
func Find(doc, heading string) (start, end int, err error) {
	at := strings.Index("\n"+doc, "\n"+heading+"\n")
	if at < 0 {
		return 0, 0, fmt.Errorf("no line %q", heading)
	}
	pos := at + len(heading) + 1
	start = -1
	for pos < len(doc) {
		line, _, _ := strings.Cut(doc[pos:], "\n")
		next := min(pos+len(line)+1, len(doc))
		switch {
		case strings.HasPrefix(line, "|"):
			if start < 0 {
				start = pos
			}
			end = next
		case start >= 0:
			return start, end, nil
		case strings.HasPrefix(line, "#"):
			return 0, 0, fmt.Errorf("no table under %q", heading)
		}
		pos = next
	}
	if start < 0 {
		return 0, 0, fmt.Errorf("no table under %q", heading)
	}
	return start, end, nil
}

// Check compares the table under heading in the file at path with want
// (its rows, each ending with a newline). With update it writes want in
// its place instead. The error names the first row that differs and how
// to regenerate the table.
func Check(path, heading, want string, update bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(raw)
	start, end, err := Find(doc, heading)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	got := doc[start:end]
	if got == want {
		return nil
	}
	if update {
		return os.WriteFile(path, []byte(doc[:start]+want+doc[end:]), 0o644)
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Errorf("%s: the table under %q differs from the code's at its row %d:\n  file: %s\n  code: %s\nedit the code's table and run the test with -update to write it", path, heading, i+1, gl, wl)
		}
	}
	return fmt.Errorf("%s: the table under %q differs from the code's", path, heading)
}

// Option is one row of an option table: the name, its values, its
// default and what it means.
type Option struct{ Name, Values, Default, Doc string }

// Options renders an option table as the docs show it.
func Options(rows []Option) string {
	var b strings.Builder
	b.WriteString("| Option | Values | Default | Meaning |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Name, r.Values, r.Default, r.Doc)
	}
	return b.String()
}
