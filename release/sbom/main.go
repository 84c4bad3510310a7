// Command sbom writes an SPDX 2.3 JSON software bill of materials of the Go
// modules built into a Go binary: the build information the Go linker
// stores in every binary (what `go version -m BINARY` prints), read with
// debug/buildinfo, so it describes exactly what was linked, for any GOARCH.
//
//	go run ./release/sbom -name underlay-linux-arm64 -version VERSION -created 2026-12-01T00:00:00Z BINARY >OUT
//
// The document has one package for the binary (its SHA-256, the build
// settings in its comment), one for the Go standard library
// (pkg:golang/stdlib@goX.Y.Z, as vulnerability scanners expect), one for the
// main module and one per dependency module, each with its purl and its
// go.sum hash, and CONTAINS relationships from the binary to every module.
// It is deterministic: -created (the commit's time in `make release`) is the
// only time in it, and the namespace is derived from the binary's hash.
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

type document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      creationInfo   `json:"creationInfo"`
	Packages          []pkg          `json:"packages"`
	Relationships     []relationship `json:"relationships"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type pkg struct {
	SPDXID                string        `json:"SPDXID"`
	Name                  string        `json:"name"`
	VersionInfo           string        `json:"versionInfo,omitempty"`
	DownloadLocation      string        `json:"downloadLocation"`
	FilesAnalyzed         bool          `json:"filesAnalyzed"`
	Checksums             []checksum    `json:"checksums,omitempty"`
	LicenseConcluded      string        `json:"licenseConcluded"`
	LicenseDeclared       string        `json:"licenseDeclared"`
	CopyrightText         string        `json:"copyrightText"`
	PrimaryPackagePurpose string        `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs          []externalRef `json:"externalRefs,omitempty"`
	Comment               string        `json:"comment,omitempty"`
}

type checksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type externalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type relationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

var notIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes an SPDX identifier (letters, digits, '.', '-') of parts.
func spdxID(parts ...string) string {
	return "SPDXRef-" + notIDChars.ReplaceAllString(strings.Join(parts, "-"), "-")
}

func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}

// module is one module's package; a replaced module is described by its
// replacement (what was linked), naming the original in the comment.
func module(kind string, m *debug.Module) pkg {
	linked, comment := m, ""
	if m.Replace != nil {
		linked = m.Replace
		comment = "replaces " + m.Path + " " + m.Version + "; "
	}
	p := pkg{
		SPDXID:                spdxID(kind, linked.Path, linked.Version),
		Name:                  linked.Path,
		VersionInfo:           linked.Version,
		DownloadLocation:      noAssertion,
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       noAssertion,
		CopyrightText:         noAssertion,
		PrimaryPackagePurpose: "LIBRARY",
	}
	if linked.Version != "" && linked.Version != "(devel)" {
		p.ExternalRefs = []externalRef{{"PACKAGE-MANAGER", "purl", purl(linked.Path, linked.Version)}}
	}
	if linked.Sum != "" {
		comment += "go.sum " + linked.Sum
	}
	p.Comment = strings.TrimSuffix(comment, "; ")
	return p
}

// generate builds the document of the binary bin (its bytes data) named
// name, released as version, created at created.
func generate(name, version string, created time.Time, data []byte, bi *buildinfo.BuildInfo) document {
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	var settings []string
	for _, s := range bi.Settings {
		settings = append(settings, s.Key+"="+s.Value)
	}
	bin := pkg{
		SPDXID:                spdxID("Binary", name),
		Name:                  name,
		VersionInfo:           version,
		DownloadLocation:      noAssertion,
		Checksums:             []checksum{{"SHA256", hexSum}},
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       noAssertion,
		CopyrightText:         noAssertion,
		PrimaryPackagePurpose: "APPLICATION",
		Comment:               "built by " + bi.GoVersion + " from package " + bi.Path + "; build settings: " + strings.Join(settings, " "),
	}
	std := pkg{
		SPDXID:                spdxID("Stdlib", bi.GoVersion),
		Name:                  "stdlib",
		VersionInfo:           bi.GoVersion,
		DownloadLocation:      noAssertion,
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       noAssertion,
		CopyrightText:         noAssertion,
		PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs:          []externalRef{{"PACKAGE-MANAGER", "purl", purl("stdlib", bi.GoVersion)}},
		Comment:               "the Go standard library and runtime of the toolchain that built the binary",
	}
	pkgs := []pkg{bin, std}
	if bi.Main.Path != "" {
		m := bi.Main
		devel := m.Version == "" || m.Version == "(devel)"
		if devel { // built from a checkout: the module is at the release's version
			m.Version = version
		}
		mainMod := module("Main", &m)
		mainMod.PrimaryPackagePurpose = "SOURCE"
		if devel {
			mainMod.Comment = "the main module, built from a checkout at release " + version
		}
		pkgs = append(pkgs, mainMod)
	}
	for _, d := range bi.Deps {
		pkgs = append(pkgs, module("Module", d))
	}
	rels := []relationship{{"SPDXRef-DOCUMENT", "DESCRIBES", bin.SPDXID}}
	for _, p := range pkgs[1:] {
		rels = append(rels, relationship{bin.SPDXID, "CONTAINS", p.SPDXID})
	}
	return document{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              name + "-" + version,
		DocumentNamespace: "https://github.com/underlay-net/underlay/spdx/" + name + "/" + version + "/" + hexSum,
		CreationInfo: creationInfo{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: underlay release/sbom (Go build information, as go version -m prints it)"},
		},
		Packages:      pkgs,
		Relationships: rels,
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	name := fs.String("name", "", "the binary's name in the document (default: the file name)")
	version := fs.String("version", "", "the release version (required)")
	createdFlag := fs.String("created", "", "the document's creation time, RFC 3339 (required: the commit's time keeps it reproducible)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *version == "" || *createdFlag == "" {
		return fmt.Errorf("usage: sbom [-name NAME] -version VERSION -created RFC3339 BINARY")
	}
	path := fs.Arg(0)
	created, err := time.Parse(time.RFC3339, *createdFlag)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: no Go build information: %w", path, err)
	}
	if *name == "" {
		*name = path[strings.LastIndex(path, "/")+1:]
	}
	out, err := json.MarshalIndent(generate(*name, *version, created, data, bi), "", "  ")
	if err != nil {
		return err
	}
	_, err = stdout.Write(append(out, '\n'))
	return err
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}
