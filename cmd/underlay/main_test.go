package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

func TestParseServeDefaultsEnvAndFlags(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	c, err := parseServe(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := serveConfig{Socket: "/run/docker/plugins/underlay.sock", State: "/var/lib/underlay/underlay.db", LogLevel: "info", DockerHost: "unix:///var/run/docker.sock", Scope: "local"}
	if c != want {
		t.Fatalf("defaults %+v, want %+v", c, want)
	}
	env = map[string]string{"LOG_LEVEL": "DEBUG", "SCOPE": "global", "STATE": "/s/u.db", "DOCKER_HOST": "unix:///d.sock"}
	if c, err = parseServe(nil, getenv, &bytes.Buffer{}); err != nil || c.LogLevel != "debug" || c.Scope != "global" || c.State != "/s/u.db" || c.DockerHost != "unix:///d.sock" {
		t.Fatalf("from the environment: %+v %v", c, err)
	}
	c, err = parseServe([]string{"--scope", "local", "--state=/f.db", "--log-level", "error", "--docker-host", "unix:///f.sock", "--socket", "/x.sock"}, getenv, &bytes.Buffer{})
	if err != nil || c.Scope != "local" || c.State != "/f.db" || c.LogLevel != "error" || c.DockerHost != "unix:///f.sock" || c.Socket != "/x.sock" {
		t.Fatalf("flags must win over the environment: %+v %v", c, err)
	}
	for _, args := range [][]string{{"--scope", "cluster"}, {"--log-level", "trace"}, {"--docker-host", "/var/run/docker.sock"}, {"--socket", ""}, {"extra"}, {"--nope"}} {
		if _, err := parseServe(args, getenv, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestRunCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "underlay ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run(nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Fatalf("no command: %d %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `"frobnicate"`) {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
}

// TestNoShellingOut: nothing the binary links can run another program;
// every kernel change goes through netlink.
func TestNoShellingOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "os/exec" {
			t.Fatal("the underlay binary depends on os/exec")
		}
	}
}
