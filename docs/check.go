package docs

import (
	"embed"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Pages are the documentation's Markdown files under root (the
// repository): README.md and docs/*.md.
func Pages(root string) ([]string, error) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(root, "README.md")}, pages...), nil
}

// A Link is a Markdown link or image outside code: its target as written
// and its line.
type Link struct {
	Target string
	Line   int
}

var (
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	headingRE  = regexp.MustCompile(`^#{1,6} +(.*?)\s*$`)
	slugDrop   = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// lines calls fn with every line of doc outside fenced code blocks.
func lines(doc string, fn func(n int, line string)) {
	fenced := false
	for i, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			fn(i+1, line)
		}
	}
}

// Links are doc's links, in order, leaving out code blocks and code spans.
func Links(doc string) []Link {
	var links []Link
	lines(doc, func(n int, line string) {
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
			links = append(links, Link{Target: m[1], Line: n})
		}
	})
	return links
}

// Anchors are the anchors of doc's headings as GitHub makes them: lower
// case, punctuation dropped, spaces as hyphens, a repeated one suffixed
// -1, -2, ...
func Anchors(doc string) []string {
	var anchors []string
	seen := map[string]int{}
	lines(doc, func(_ int, line string) {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			return
		}
		slug := strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", slug, n))
		} else {
			anchors = append(anchors, slug)
		}
		seen[slug]++
	})
	return anchors
}

// section is the part of doc under the heading line heading, up to the
// next heading of the same or a higher level.
func section(doc, heading string) (string, error) {
	level := len(heading) - len(strings.TrimLeft(heading, "#"))
	var b strings.Builder
	in, found := false, false
	lines(doc, func(_ int, line string) {
		if line == heading {
			in, found = true, true
			return
		}
		if in && strings.HasPrefix(line, "#") {
			if l := len(line) - len(strings.TrimLeft(line, "#")); l <= level && strings.HasPrefix(line[l:], " ") {
				in = false
			}
		}
		if in {
			b.WriteString(line + "\n")
		}
	})
	if !found {
		return "", fmt.Errorf("no heading %q", heading)
	}
	return b.String(), nil
}

// MetricsReference is the first column of the table of metrics in
// docs/operating.md (under "### Metrics"): the metric names it documents.
// It reads the page built into the package, so that a test binary run
// away from the repository (the VM suites') can check a live daemon
// against it.
func MetricsReference() ([]string, error) {
	doc, err := pages.ReadFile("operating.md")
	if err != nil {
		return nil, err
	}
	sec, err := section(string(doc), "### Metrics")
	if err != nil {
		return nil, fmt.Errorf("docs/operating.md: %w", err)
	}
	var names []string
	for line := range strings.SplitSeq(sec, "\n") {
		if !strings.HasPrefix(line, "| `underlay_") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, errors.New("docs/operating.md: no metric in the table under ### Metrics")
	}
	return names, nil
}

// pages are this directory's pages, for MetricsReference.
//
//go:embed operating.md
var pages embed.FS

// A Refusal is the format of an error the code answers a request with,
// as users see it (in `docker network create` or `docker run`, or from
// underlay doctor's repairs), and where it is made.
type Refusal struct {
	Format string
	Where  string
}

// refusalSentinels are the errors whose wrapping makes a refusal a user
// sees: the plugin protocol's classes (an invalid request, a conflict)
// and a lease the LAN's server did not give (the start of a container on
// a DHCP network fails with it). Renewals' errors are logged, not answered.
var refusalSentinels = map[string][]string{
	"pluginapi": {"ErrInvalid", "ErrConflict", "ErrNotFound"},
	"dhcp":      {"ErrNoAnswer", "ErrNAK", "ErrUnusable", "ErrNotOffered"},
	"dhcp6":     {"ErrNoAnswer", "ErrNoAddrsAvail", "ErrUnusable"},
}

// refusalConstructors are the functions whose calls make a refusal from a
// format: pluginapi.Invalidf, the packages' own invalidf and conflictf,
// and doctor's repairs' refusef.
var refusalConstructors = []string{"Invalidf", "invalidf", "conflictf", "refusef"}

// Refusals walks the Go code of the module under root (not its tests, not
// test/) for the refusals it can answer: the format of every call of the
// refusal constructors (refusalConstructors), of every fmt.Errorf that
// wraps a refusal sentinel (refusalSentinels), and of every fmt.Errorf in
// a function whose name says it refuses (Refuse..., lancheck.Refuse: the
// driver answers its error). A format is a string literal, or literals
// joined with +.
func Refusals(root string) ([]Refusal, error) {
	var out []Refusal
	err := walkCode(root, func(path string, fset *token.FileSet, f *ast.File) error {
		local := filepath.Base(filepath.Dir(path))
		var bad error
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			if !isRefusal(call, f.Name.Name, local) && !(isErrorf(call) && inRefuser(f, call)) {
				return true
			}
			where := fset.Position(call.Pos()).String()
			if rel, err := filepath.Rel(root, where); err == nil {
				where = rel
			}
			format, ok := literal(call.Args[0])
			if !ok {
				if isConstructor(f, call) {
					return true // the constructor's own body passes its format on
				}
				bad = errors.Join(bad, fmt.Errorf("%s: a refusal's format is not a string literal: write it as one, so the troubleshooting check can read it", where))
				return true
			}
			out = append(out, Refusal{Format: format, Where: where})
			return true
		})
		return bad
	})
	return out, err
}

// isRefusal says whether call makes a refusal.
func isRefusal(call *ast.CallExpr, pkg, dir string) bool {
	var name, qual string
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		name, qual = fn.Name, pkg
	case *ast.SelectorExpr:
		name = fn.Sel.Name
		if id, ok := fn.X.(*ast.Ident); ok {
			qual = id.Name
		}
	}
	switch {
	case slices.Contains(refusalConstructors, name):
		return true
	case name == "Errorf" && qual == "fmt":
		for _, a := range call.Args[1:] {
			var q, s string
			switch a := a.(type) {
			case *ast.Ident:
				q, s = dir, a.Name
			case *ast.SelectorExpr:
				if id, ok := a.X.(*ast.Ident); ok {
					q, s = id.Name, a.Sel.Name
				}
			}
			if slices.Contains(refusalSentinels[q], s) {
				return true
			}
		}
	}
	return false
}

// isConstructor says whether call is inside the body of a refusal
// constructor.
func isConstructor(f *ast.File, call *ast.CallExpr) bool {
	return slices.Contains(refusalConstructors, enclosing(f, call))
}

// inRefuser says whether call is inside a function whose name says it
// refuses (Refuse, refuseX).
func inRefuser(f *ast.File, call *ast.CallExpr) bool {
	name := enclosing(f, call)
	return strings.HasPrefix(name, "Refuse") || strings.HasPrefix(name, "refuse") && !slices.Contains(refusalConstructors, name)
}

// enclosing is the name of the function declaration call is in.
func enclosing(f *ast.File, call *ast.CallExpr) string {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil && call.Pos() >= fn.Body.Pos() && call.End() <= fn.Body.End() {
			return fn.Name.Name
		}
	}
	return ""
}

// isErrorf says whether call is fmt.Errorf.
func isErrorf(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Errorf" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "fmt"
}

// literal is the string e spells: a string literal, or literals joined
// with +.
func literal(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, okx := literal(e.X)
		y, oky := literal(e.Y)
		return x + y, okx && oky
	case *ast.ParenExpr:
		return literal(e.X)
	}
	return "", false
}

var verbRE = regexp.MustCompile(`%[-+# 0-9.*\[\]]*[a-zA-Z%]`)

// Words is format's literal text, its verbs (what a refusal fills in)
// replaced by "…".
func Words(format string) string {
	return verbRE.ReplaceAllString(format, "…")
}

// TroubleshootingKeys are the texts docs/troubleshooting.md's entries
// quote of the refusals they explain: the code spans of its lines that
// start with "You see:", each the words of a refusal as its user sees
// them, "…" standing for what the refusal fills in.
func TroubleshootingKeys(root string) ([]string, error) {
	path := filepath.Join(root, "docs", "troubleshooting.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []string
	lines(string(doc), func(_ int, line string) {
		if !strings.HasPrefix(line, "You see:") {
			return
		}
		for _, span := range codeSpanRE.FindAllString(line, -1) {
			keys = append(keys, strings.Trim(span, "`"))
		}
	})
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no line starts with \"You see:\"", path)
	}
	return keys, nil
}

// Quotes says whether key quotes format: key's pieces between "…" appear
// in format's words, in order.
func Quotes(key, format string) bool {
	words := Words(format)
	for piece := range strings.SplitSeq(key, "…") {
		piece = strings.TrimSpace(piece)
		i := strings.Index(words, piece)
		if i < 0 {
			return false
		}
		words = words[i+len(piece):]
	}
	return true
}

// Literal counts the words of format outside its verbs: a format of fewer
// than three ("pool %s %s") is one whose message is its arguments', and
// has no class of its own to quote.
func Literal(format string) int {
	return len(strings.FieldsFunc(verbRE.ReplaceAllString(format, " "), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '=')
	}))
}

// Exists says whether path names a file or directory.
func Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// LogMessages are the messages the table under "## Warnings in the log"
// of docs/troubleshooting.md quotes: the code spans of its first column,
// each a message or the start of one ("…" ends a quote cut short).
func LogMessages(root string) ([]string, error) {
	path := filepath.Join(root, "docs", "troubleshooting.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sec, err := section(string(doc), "## Warnings in the log")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var msgs []string
	for line := range strings.SplitSeq(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, span := range codeSpanRE.FindAllString(cells[1], -1) {
			msgs = append(msgs, strings.TrimSpace(strings.TrimSuffix(strings.Trim(span, "`"), "…")))
		}
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%s: no message in the table under ## Warnings in the log", path)
	}
	return msgs, nil
}

// Literals are the string literals of the module's Go code under root
// (tests and test/ left out), each whole as the code spells it: the texts
// its messages are made of. Comments are not among them.
func Literals(root string) ([]string, error) {
	var out []string
	err := walkCode(root, func(_ string, _ *token.FileSet, f *ast.File) error {
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out = append(out, s)
				}
			}
			return true
		})
		return nil
	})
	return out, err
}

// walkCode calls fn with each Go file of the module under root that is
// not a test (not _test.go, not under test/, testdata/, bin/, dist/ or a
// hidden directory), parsed into fset.
func walkCode(root string, fn func(path string, fset *token.FileSet, f *ast.File) error) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "test" || name == "testdata" || name == "bin" || name == "dist" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		return fn(path, fset, f)
	})
}
