package config

import (
	"strconv"
	"strings"
)

// autoParent is the parent option's keyword for "pick by routes".
const autoParent = "auto"

// maxCandidates bounds a candidate list (the manager parses it too).
const maxCandidates = 32

// ParentSpec is a parsed parent option.
type ParentSpec struct {
	// Candidates are the names to try in order: one for a plain name,
	// none for auto or an internal network.
	Candidates []string
	// Auto picks the link by the host's routes; VLAN (auto.VID) asks for
	// that VLAN on it.
	Auto bool
	VLAN int
}

// ParseParent validates the parent option's syntax without looking at
// the host: the swarm manager (AllocateNetwork) can do no more.
func ParseParent(v string) (ParentSpec, error) {
	switch {
	case v == "":
		return ParentSpec{}, nil
	case v == autoParent:
		return ParentSpec{Auto: true}, nil
	case strings.HasPrefix(v, autoParent+".") && !strings.Contains(v, ","):
		id := strings.TrimPrefix(v, autoParent+".")
		vid, err := strconv.Atoi(id)
		if err != nil || strings.ContainsAny(id, "+-") || vid < 1 || vid > 4094 {
			return ParentSpec{}, Invalidf("parent %q: auto.VID needs a VLAN ID from 1 to 4094 (for example parent=auto.10)", v)
		}
		return ParentSpec{Auto: true, VLAN: vid}, nil
	}
	names := strings.Split(v, ",")
	if len(names) > maxCandidates {
		return ParentSpec{}, Invalidf("parent lists %d candidates, more than %d: list the interface names your hosts really use, or use parent=auto", len(names), maxCandidates)
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		switch {
		case name == "":
			return ParentSpec{}, Invalidf("parent %q has an empty candidate: list interface names separated by commas, without spaces (parent=eth0,ens3)", v)
		case len(names) > 1 && (name == autoParent || strings.HasPrefix(name, autoParent+".")):
			return ParentSpec{}, Invalidf("parent %q: %s cannot be one of several candidates: use parent=%s alone, or list interface names", v, name, name)
		case seen[name]:
			return ParentSpec{}, Invalidf("parent %q lists %s twice: list each candidate once", v, name)
		}
		seen[name] = true
		if err := checkParentName(name); err != nil {
			return ParentSpec{}, err
		}
	}
	return ParentSpec{Candidates: names}, nil
}

// Multiple reports whether the option can resolve differently per node.
func (s ParentSpec) Multiple() bool { return s.Auto || len(s.Candidates) > 1 }
