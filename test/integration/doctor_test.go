package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/internal/itest"
)

// cli runs `underlay ARGS...` (the operator's commands talk to the daemon
// over its socket) and returns stdout, stderr and the exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(itest.Binary(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	}
	t.Fatalf("underlay %v: %v", args, err)
	return "", "", -1
}

func lsJSON(t *testing.T, d *itest.Daemon, dockerHost string) control.Listing {
	t.Helper()
	out, errOut, code := cli(t, "ls", "--socket", d.Socket, "--docker-host", dockerHost, "--json")
	if code != 0 {
		t.Fatalf("underlay ls --json exited %d: %s", code, errOut)
	}
	var l control.Listing
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("ls --json is not one JSON object: %v\n%s", err, out)
	}
	return l
}

// doctor and ls through the real binary against a fake Docker: healthy is
// exit 0; a network Docker does not know is a finding (exit 1) naming it;
// --repair removes it (exit 0) and ls no longer lists it, while the
// network Docker knows and its endpoint stay.
func TestDoctorAndLs(t *testing.T) {
	t.Parallel()
	docker := itest.NewFakeDocker(t)
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	// No LAN preflight: on these veths nobody answers for the gateways,
	// and its problems would be lan-check findings (exit 1).
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": "vp0", "lan_check": "false"}, V4: []string{"198.18.1.0/24,198.18.1.1/24"}})
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": "lanx,vp1", "lan_check": "false"}, V4: []string{"198.18.2.0/24,198.18.2.1/24"}})
	created := time.Now()
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	docker.SetLive(netA, netB)

	out, errOut, code := cli(t, "doctor", "--socket", d.Socket, "--docker-host", docker.Host())
	if code != control.ExitHealthy || !strings.Contains(out, "healthy") {
		t.Fatalf("doctor on a healthy daemon: exit %d\n%s%s", code, out, errOut)
	}
	l := lsJSON(t, d, docker.Host())
	if !l.Docker.Reachable || len(l.Networks) != 2 {
		t.Fatalf("ls: %+v", l)
	}
	a, b := l.Networks[0], l.Networks[1]
	if a.ID != netA || a.Name != "net-aaaaaaaaaaaa" || a.Link != "vp0" || len(a.Endpoints) != 1 || !a.Endpoints[0].Joined || a.Endpoints[0].Link != linkA {
		t.Errorf("ls network A: %+v", a)
	}
	if b.Parent != "lanx,vp1" || b.Link != "vp1" || strings.Join(b.Subnets, ",") != "198.18.2.0/24" {
		t.Errorf("ls network B: parent %q link %q subnets %v; want the option as asked, vp1 and its subnet", b.Parent, b.Link, b.Subnets)
	}
	table, _, code := cli(t, "ls", "--socket", d.Socket, "--docker-host", docker.Host())
	if code != 0 || !strings.Contains(table, "net-aaaaaaaaaaaa") || !strings.Contains(table, linkA) {
		t.Errorf("ls table (exit %d):\n%s", code, table)
	}

	// Docker forgets B (removed while underlay was down).
	docker.SetLive(netA)
	time.Sleep(time.Until(created.Add(3500 * time.Millisecond))) // past the stale grace
	out, _, code = cli(t, "doctor", "--socket", d.Socket, "--docker-host", docker.Host())
	if code != control.ExitFindings || !strings.Contains(out, "stale-network "+netB) || !strings.Contains(out, "--repair") {
		t.Fatalf("doctor with a network Docker does not know: exit %d, want 1 naming %s\n%s", code, netB, out)
	}
	ns.WantLinks(with(linkA)...)

	// Docker unreachable: not a finding, but the checks that need Docker
	// were skipped, and doctor says so: exit 3 (incomplete), never
	// "healthy" and 0, naming the skipped checks and why.
	out, errOut, code = cli(t, "doctor", "--socket", d.Socket, "--docker-host", "unix:///nonexistent/docker.sock")
	if code != control.ExitIncomplete || strings.Contains(out, "healthy") || !strings.Contains(out, "incomplete") ||
		!strings.Contains(errOut, "warning: stale-network check skipped: Docker could not be asked") || !strings.Contains(errOut, "unused-pool check skipped") ||
		!strings.Contains(errOut, "/nonexistent/docker.sock") {
		t.Errorf("doctor without Docker: exit %d, want %d naming the skipped checks and why\n%s%s", code, control.ExitIncomplete, out, errOut)
	}
	out, _, code = cli(t, "doctor", "--socket", d.Socket, "--docker-host", "unix:///nonexistent/docker.sock", "--json")
	var incomplete control.Report
	if err := json.Unmarshal([]byte(out), &incomplete); err != nil || code != control.ExitIncomplete || incomplete.Complete || len(incomplete.Skipped) != 2 {
		t.Errorf("doctor --json without Docker: exit %d, %+v, %v\n%s", code, incomplete, err, out)
	}

	// A Docker that is not the daemon's says B is gone, the daemon's own
	// still knows it: the repair is refused, nothing is removed.
	other := itest.NewFakeDocker(t)
	other.SetLive(netA)
	docker.SetLive(netA, netB)
	out, errOut, code = cli(t, "doctor", "--socket", d.Socket, "--docker-host", other.Host(), "--repair")
	if code != control.ExitFindings || !strings.Contains(out, "could not repair stale-network "+netB) || !strings.Contains(out, "the daemon's Docker knows it") {
		t.Fatalf("doctor --repair against another engine: exit %d, want 1 with the repair refused\n%s%s", code, out, errOut)
	}
	if strings.Count(out, "could not repair") != 1 {
		t.Errorf("the refused repair was sent more than once:\n%s", out)
	}
	wantState(t, d, 1, netA, netB)
	docker.SetLive(netA)

	out, errOut, code = cli(t, "doctor", "--socket", d.Socket, "--docker-host", docker.Host(), "--repair")
	if code != control.ExitHealthy || !strings.Contains(out, "repaired stale-network "+netB) {
		t.Fatalf("doctor --repair: exit %d, want 0 after removing %s\n%s%s", code, netB, out, errOut)
	}
	l = lsJSON(t, d, docker.Host())
	if len(l.Networks) != 1 || l.Networks[0].ID != netA {
		t.Fatalf("ls after the repair lists %+v, want network A only", l.Networks)
	}
	ns.WantLinks(with(linkA)...) // A's endpoint link is untouched
	wantState(t, d, 1, netA)

	// JSON report of a healthy daemon: empty lists, not null.
	out, _, code = cli(t, "doctor", "--socket", d.Socket, "--docker-host", docker.Host(), "--repair", "--json")
	var r control.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.Remaining != 0 || len(r.Repairs) != 0 || !strings.Contains(out, `"findings": []`) ||
		!r.Complete || !strings.Contains(out, `"skipped": []`) {
		t.Fatalf("doctor --repair --json: exit %d, %+v, %v\n%s", code, r, err, out)
	}
	wantState(t, d, 1, netA)

	// A typo in --docker-host is an error, not a skipped check.
	if _, errOut, code = cli(t, "doctor", "--socket", d.Socket, "--docker-host", "/var/run/docker.sock"); code != control.ExitCannot || !strings.Contains(errOut, "unix:///path/to/docker.sock") {
		t.Errorf("doctor --docker-host without scheme: exit %d: %s", code, errOut)
	}

	// It could not run: exit 2, saying why.
	_, errOut, code = cli(t, "doctor", "--socket", "/nonexistent/underlay.sock")
	if code != control.ExitCannot || !strings.Contains(errOut, "/nonexistent/underlay.sock") {
		t.Errorf("doctor with no daemon: exit %d, want 2 naming the socket: %s", code, errOut)
	}
}
