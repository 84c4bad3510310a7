package mdtable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	doc := "# T\n\n### Options\n\nText.\n\n| A | B |\n|---|---|\n| `x` | 1 |\n\nAfter.\n\n### Next\n\n| C |\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(path, "### Options", "| A | B |\n|---|---|\n| `x` | 1 |\n", false); err != nil {
		t.Fatalf("same table: %v", err)
	}
	err := Check(path, "### Options", "| A | B |\n|---|---|\n| `x` | 2 |\n", false)
	if err == nil || !strings.Contains(err.Error(), "row 3") || !strings.Contains(err.Error(), "| `x` | 2 |") {
		t.Fatalf("a changed cell: %v, want the row named", err)
	}
	if err := Check(path, "### Options", "| A | B |\n|---|---|\n| `x` | 2 |\n| `y` | 3 |\n", true); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if want := strings.Replace(doc, "| `x` | 1 |\n", "| `x` | 2 |\n| `y` | 3 |\n", 1); string(raw) != want {
		t.Fatalf("updated:\n%s\nwant:\n%s", raw, want)
	}
	if err := Check(path, "### Missing", "", false); err == nil {
		t.Fatal("a missing heading was not an error")
	}
	if err := Check(path, "# T", "", false); err == nil || !strings.Contains(err.Error(), "no table") {
		t.Fatalf("a heading whose section has no table before the next heading: %v", err)
	}
}
