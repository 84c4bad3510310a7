package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var updateRepairConfig = flag.Bool("update-repair-config", false, "write plugin/config-repair.json from config.json")

// repairOverlay is what the repair plugin (plugin/config-repair.json)
// changes in the managed plugin's config.json, and nothing else: the
// container-side repair on (CONTAINER_REPAIR_WAIT settable, 5m), the host's
// /run mounted with the mounts below it (rbind, still read-only; rslave:
// the namespaces dockerd mounts and unmounts later follow), where
// SANDBOX_DIR finds dockerd's <exec-root>/netns, and CAP_SYS_ADMIN, which
// entering a container's namespace needs.
func repairOverlay(t *testing.T, cfg map[string]any) map[string]any {
	t.Helper()
	cfg["description"] = cfg["description"].(string) + "; this variant also makes running containers' interfaces again after their parent link was deleted and re-created (CAP_SYS_ADMIN)"
	linux := cfg["linux"].(map[string]any)
	linux["capabilities"] = append(linux["capabilities"].([]any), "CAP_SYS_ADMIN")
	for _, m := range cfg["mounts"].([]any) {
		m := m.(map[string]any)
		if m["name"] != "run" {
			continue
		}
		m["description"] = "the host's /run, read-only with the mounts below it as they come and go (rbind, rslave: /run must be a shared mount, as systemd makes it): the Docker API socket (DOCKER_HOST), and containers' network namespaces in dockerd's <exec-root>/netns (SANDBOX_DIR)"
		m["options"] = []any{"rbind", "ro", "rslave"}
	}
	var env []any
	for _, e := range cfg["env"].([]any) {
		if e.(map[string]any)["name"] != "CONTAINER_REPAIR_WAIT" {
			env = append(env, e)
		}
	}
	env = append(env,
		map[string]any{"name": "CONTAINER_REPAIR_WAIT", "description": "how long running containers whose parent link was deleted wait for it to come back, to get their interface made again; 0 turns that off",
			"settable": []any{"value"}, "value": "5m"},
		map[string]any{"name": "SANDBOX_DIR", "description": "dockerd's <exec-root>/netns as the plugin sees it through its /run mount",
			"settable": []any{"value"}, "value": "/host/run/docker/netns"})
	cfg["env"] = env
	return cfg
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// plugin/config-repair.json is config.json with the repair overlay, and
// the daemon reads the settings it gives: its SANDBOX_DIR is the netns
// mount's destination.
func TestRepairPluginConfig(t *testing.T) {
	base := filepath.Join("..", "..", "config.json")
	path := filepath.Join("..", "..", "plugin", "config-repair.json")
	want := repairOverlay(t, readJSON(t, base))
	if *updateRepairConfig {
		out, err := json.MarshalIndent(want, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := readJSON(t, path)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s is not config.json with the repair overlay: run go test ./cmd/underlay -run TestRepairPluginConfig -update-repair-config", path)
	}
	env := map[string]string{}
	for _, e := range got["env"].([]any) {
		m := e.(map[string]any)
		env[m["name"].(string)] = m["value"].(string)
	}
	c, err := parseServe(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil || c.ContainerRepairWait <= 0 || c.SandboxDir != "/host/run/docker/netns" {
		t.Fatalf("the repair plugin's environment gives %v, sandbox dir %q (%v): want the repair on, in /host/run/docker/netns", c.ContainerRepairWait, c.SandboxDir, err)
	}
	base0 := readJSON(t, base)
	benv := map[string]string{}
	for _, e := range base0["env"].([]any) {
		m := e.(map[string]any)
		benv[m["name"].(string)] = m["value"].(string)
	}
	if c, err := parseServe(nil, func(k string) string { return benv[k] }, &bytes.Buffer{}); err != nil || c.ContainerRepairWait >= 0 {
		t.Fatalf("the default plugin's environment gives repair wait %v (%v): want it off", c.ContainerRepairWait, err)
	}
}
