package reconcile

import "testing"

// SandboxPath opens a SandboxKey by its file name in SandboxDir, and
// never a path outside it.
func TestSandboxPath(t *testing.T) {
	x := &Executor{}
	if got := x.SandboxPath("/var/run/docker/netns/abc"); got != "/var/run/docker/netns/abc" {
		t.Fatalf("without SandboxDir: %s", got)
	}
	x.SandboxDir = "/host/netns"
	for key, want := range map[string]string{
		"/var/run/docker/netns/abc": "/host/netns/abc",
		"/x/..":                     "/host/netns/.invalid-sandbox-key",
		"..":                        "/host/netns/.invalid-sandbox-key",
		"/":                         "/host/netns/.invalid-sandbox-key",
		"":                          "/host/netns/.invalid-sandbox-key",
	} {
		if got := x.SandboxPath(key); got != want {
			t.Errorf("SandboxPath(%q) = %s, want %s", key, got, want)
		}
	}
}
