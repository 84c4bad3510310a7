package main

import (
	"bytes"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
)

// The document of this test binary: valid JSON with the SPDX fields, the
// binary's SHA-256, the standard library of the toolchain that built it, and
// the same bytes when generated twice.
func TestDocumentOfThisBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-name", "self", "-version", "v1.2.3", "-created", "2026-12-01T10:00:00Z", exe}
	var a, b bytes.Buffer
	if err := run(args, &a); err != nil {
		t.Fatal(err)
	}
	if err := run(args, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two documents of one binary differ")
	}
	var doc document
	if err := json.Unmarshal(a.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != "2026-12-01T10:00:00Z" || doc.Name != "self-v1.2.3" {
		t.Errorf("header: %+v", doc)
	}
	if len(doc.Packages) < 2 || doc.Packages[0].Name != "self" || len(doc.Packages[0].Checksums) != 1 || len(doc.Packages[0].Checksums[0].ChecksumValue) != 64 {
		t.Fatalf("first package is not the binary with its SHA-256: %+v", doc.Packages)
	}
	if !strings.HasSuffix(doc.DocumentNamespace, doc.Packages[0].Checksums[0].ChecksumValue) {
		t.Errorf("namespace %s is not derived from the binary's hash", doc.DocumentNamespace)
	}
	std := doc.Packages[1]
	if std.Name != "stdlib" || std.VersionInfo != runtime.Version() || std.ExternalRefs[0].ReferenceLocator != "pkg:golang/stdlib@"+runtime.Version() {
		t.Errorf("stdlib package: %+v", std)
	}
	ids := map[string]bool{}
	for _, p := range doc.Packages {
		if ids[p.SPDXID] {
			t.Errorf("SPDX ID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
	}
	if len(doc.Relationships) != len(doc.Packages) {
		t.Errorf("%d relationships for %d packages (DESCRIBES + one CONTAINS per other package)", len(doc.Relationships), len(doc.Packages))
	}
}

func TestSPDXID(t *testing.T) {
	if got := spdxID("Module", "github.com/x/y", "v1.0.0+incompatible"); got != "SPDXRef-Module-github.com-x-y-v1.0.0-incompatible" {
		t.Errorf("spdxID = %s", got)
	}
}

func TestUsage(t *testing.T) {
	if err := run([]string{"-version", "v1"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("no binary: %v", err)
	}
	if err := run([]string{"-version", "v1", "-created", "yesterday", "x"}, &bytes.Buffer{}); err == nil {
		t.Error("bad -created accepted")
	}
}
