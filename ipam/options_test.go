package ipam

import (
	"flag"
	"strings"
	"testing"

	"github.com/underlay-net/underlay/internal/mdtable"
	"github.com/underlay-net/underlay/internal/probeopt"
)

var update = flag.Bool("update", false, "write the IPAM option table of docs/ipam.md from the option table")

// The IPAM options table of docs/ipam.md is the option table's: a name,
// values, default or doc that differs fails here (go test -update
// writes it).
func TestDocsIPAMOptions(t *testing.T) {
	if err := mdtable.Check("../docs/ipam.md", "**IPAM options (`--ipam-opt`)**", PoolOptionsMarkdown(), *update); err != nil {
		t.Fatal(err)
	}
}

func TestPoolOptionTable(t *testing.T) {
	seen := map[string]bool{}
	for _, opt := range PoolOptions {
		if opt.Name == "" || opt.Values == "" || opt.Default == "" || opt.Doc == "" || opt.parse == nil {
			t.Errorf("row %q lacks a field: %+v", opt.Name, opt)
		}
		if seen[opt.Name] || strings.HasPrefix(opt.Name, dockerKeyPrefix) {
			t.Errorf("option %s is in the table twice, or is Docker's", opt.Name)
		}
		seen[opt.Name] = true
	}
	// The refusal of an unknown option names it and every valid one.
	_, err := parsePoolRequest("", "", "", map[string]string{"bogus": "1"}, false, DefaultBases())
	if err == nil || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), strings.Join(PoolOptionNames(), ", ")) {
		t.Fatalf("unknown option: %v; want it named with %v", err, PoolOptionNames())
	}
	// Each row's value reaches the request.
	r, err := parsePoolRequest("", "", "", map[string]string{OptSize: "/26", OptSize6: "64", probeopt.Name: "1s"}, false, DefaultBases())
	if err != nil || r.Size != 26 || r.Probe != "1s" {
		t.Fatalf("size=/26 address_probe=1s: %+v, %v", r, err)
	}
	r, err = parsePoolRequest("", "198.18.5.0/24", "", map[string]string{OptParent: "eth0"}, false, DefaultBases())
	if err != nil || r.Parent != "eth0" || r.Size != 0 {
		t.Fatalf("parent=eth0: %+v, %v", r, err)
	}
}
