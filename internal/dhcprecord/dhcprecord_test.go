package dhcprecord

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
)

// A lease's record keeps what it was taken (or renewed) with: the client
// ID and host name of DHCP, the DUID and host name of DHCPv6, so every
// renewal from the record presents them again; and reads back as the
// lease it was.
func TestRecordsKeepTheRequest(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	mac := net.HardwareAddr{0x52, 0x31, 0x86, 0xb0, 0xb1, 0x32}
	l := dhcp.Lease{Addr: netip.MustParsePrefix("198.18.180.120/24"), ServerID: netip.MustParseAddr("198.18.180.1"),
		LeaseTime: 2 * time.Minute, T1: time.Minute, T2: 105 * time.Second, Acquired: t0}
	rec := ToRecord(l, dhcp.Request{MAC: mac, ClientID: append([]byte{1}, mac...), Hostname: "web"})
	if rec.ClientID != "01523186b0b132" || rec.Hostname != "web" || !rec.T1.Equal(t0.Add(time.Minute)) || !rec.Expiry.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("record %+v", rec)
	}
	back, err := FromRecord(rec)
	if err != nil || back.Addr != l.Addr || back.T1 != l.T1 || back.LeaseTime != l.LeaseTime || back.ServerID != l.ServerID {
		t.Fatalf("back %+v %v, want %+v", back, err, l)
	}
	l6 := dhcp6.Lease{Addr: netip.MustParseAddr("2001:db8:180::100"), ServerID: []byte{0, 3, 0, 1, 2, 0, 0, 0, 0, 1}, IAID: [4]byte(mac[2:]),
		T1: time.Minute, T2: 2 * time.Minute, Preferred: 3 * time.Minute, Valid: 4 * time.Minute, Acquired: t0}
	rec6 := ToRecord6(l6, dhcp6.Request{MAC: mac, DUID: dhcp6.DUIDFromMAC(mac), IAID: l6.IAID, Hostname: "web"})
	if rec6.DUID != "00030001523186b0b132" || rec6.IAID != "86b0b132" || rec6.Hostname != "web" {
		t.Fatalf("record6 %+v", rec6)
	}
	if back6 := FromRecord6(rec6); back6.Addr != l6.Addr || back6.IAID != l6.IAID || back6.Valid != l6.Valid || string(back6.ServerID) != string(l6.ServerID) {
		t.Fatalf("back6 %+v, want %+v", back6, l6)
	}
}
