package rules

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestPlanBlocks(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	lost := []BlockKey{{"lan0", a("198.18.180.100")}, {"lan0", a("198.18.180.101")}}
	present := []BlockKey{{"lan0", a("198.18.180.101")}, {"lan1", a("198.18.9.9")}}
	add, remove := PlanBlocks(lost, present)
	if fmt.Sprint(add) != fmt.Sprint([]BlockKey{{"lan0", a("198.18.180.100")}}) || fmt.Sprint(remove) != fmt.Sprint([]BlockKey{{"lan1", a("198.18.9.9")}}) {
		t.Fatalf("add %v remove %v", add, remove)
	}
}
