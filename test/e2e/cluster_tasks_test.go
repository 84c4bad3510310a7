//go:build e2e

package e2e

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/dockerid"
)

// service is a swarm service of sleeping tasks on one network.
type service struct {
	name     string
	net      string
	prefix   string // the network's address prefix, "198.18.40."
	global   bool
	replicas int
}

// task is a running task container as seen on its node.
type task struct {
	node    *node
	service service
	id      string
	addr    string // eth0's IPv4 address, read inside the task
	iflink  int    // /sys/class/net/eth0/iflink inside the task
}

func (k task) String() string {
	return fmt.Sprintf("%s task %s on %s (%s, iflink %d)", k.service.name, dockerid.Short(k.id), k.node.name, k.addr, k.iflink)
}

// createService creates the service on the manager from the image ID.
func (c *cluster) createService(t *testing.T, s service) {
	t.Helper()
	args := []string{"service", "create", "-d", "--name", s.name, "--network", s.net,
		"--stop-grace-period", "1s", "--no-resolve-image"}
	if s.global {
		args = append(args, "--mode", "global")
	} else {
		args = append(args, "--replicas", strconv.Itoa(s.replicas))
	}
	c.manager().must(t, append(args, c.e.image, "sleep", "86400")...)
}

// want is how many tasks of s should run on the whole cluster.
func (c *cluster) want(s service) int {
	if s.global {
		return len(c.nodes)
	}
	return s.replicas
}

// converged returns the running tasks of the services when the manager
// reports every one complete and the nodes run exactly those containers
// (one per node for a global service), each answering docker exec.
func (c *cluster) converged(services []service) ([]task, error) {
	out, err := c.manager().docker("service", "ls", "--format", "{{.Name}} {{.Replicas}}")
	if err != nil {
		return nil, err
	}
	replicas := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if name, r, ok := strings.Cut(l, " "); ok {
			replicas[name] = r
		}
	}
	byName := map[string]service{}
	for _, s := range services {
		byName[s.name] = s
		if w := fmt.Sprintf("%d/%d", c.want(s), c.want(s)); replicas[s.name] != w {
			return nil, fmt.Errorf("service %s: replicas %q, want %s", s.name, replicas[s.name], w)
		}
	}
	var tasks []task
	count := map[string]int{}
	for _, n := range c.nodes {
		out, err := n.docker("ps", "--filter", "label=com.docker.swarm.service.name", "--filter", "status=running",
			"--format", `{{.ID}} {{.Label "com.docker.swarm.service.name"}}`)
		if err != nil {
			return nil, err
		}
		perNode := map[string]int{}
		for _, l := range strings.Split(out, "\n") {
			id, name, _ := strings.Cut(l, " ")
			if s, ok := byName[name]; ok {
				tasks = append(tasks, task{node: n, service: s, id: id})
				perNode[name]++
				count[name]++
			}
		}
		for _, s := range services {
			if s.global && perNode[s.name] != 1 {
				return nil, fmt.Errorf("%s runs %d containers of global service %s", n.name, perNode[s.name], s.name)
			}
		}
	}
	for _, s := range services {
		if count[s.name] != c.want(s) {
			return nil, fmt.Errorf("service %s: %d running containers on the nodes, want %d", s.name, count[s.name], c.want(s))
		}
	}
	return tasks, c.inspect(tasks)
}

// inspect reads every task's eth0 address and iflink inside the task,
// eight at a time.
func (c *cluster) inspect(tasks []task) error {
	var mu sync.Mutex
	var errs []string
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Add(1)
		go func(k *task) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out, err := k.node.docker("exec", k.id, "sh", "-c", "ip -4 -o addr show dev eth0; cat /sys/class/net/eth0/iflink")
			if err == nil {
				err = k.parse(out)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("%s task %s on %s: %v", k.service.name, dockerid.Short(k.id), k.node.name, err))
				mu.Unlock()
			}
		}(&tasks[i])
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].addr < tasks[j].addr })
	return nil
}

// parse takes `ip -4 -o addr show dev eth0` and the iflink from out.
func (k *task) parse(out string) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var addrs []string
	for _, l := range lines[:len(lines)-1] {
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				addrs = append(addrs, strings.SplitN(f[i+1], "/", 2)[0])
			}
		}
	}
	if len(addrs) != 1 {
		return fmt.Errorf("eth0 has IPv4 addresses %v, want one: %q", addrs, out)
	}
	idx, err := strconv.Atoi(strings.TrimSpace(lines[len(lines)-1]))
	if err != nil {
		return fmt.Errorf("iflink: %q", out)
	}
	k.addr, k.iflink = addrs[0], idx
	return nil
}

// settle waits until the services converge and returns their tasks.
func (c *cluster) settle(t *testing.T, services []service, timeout time.Duration) []task {
	t.Helper()
	start := time.Now()
	var tasks []task
	within(t, timeout, "services converge", func() (err error) {
		tasks, err = c.converged(services)
		return err
	}, func() {
		out, _ := c.manager().docker(append([]string{"service", "ps", "--no-trunc", "--filter", "desired-state=running",
			"--format", "{{.Name}} {{.Node}} {{.CurrentState}} {{.Error}}"}, serviceNames(services)...)...)
		t.Logf("service ps:\n%s", out)
	})
	t.Logf("%d tasks of %s running after %s", len(tasks), strings.Join(serviceNames(services), ", "), time.Since(start).Round(time.Millisecond))
	return tasks
}

func serviceNames(services []service) []string {
	var out []string
	for _, s := range services {
		out = append(out, s.name)
	}
	return out
}

// checkTasks fails unless every task's address is in its network and
// distinct across all nodes, and its eth0 hangs off its own node's LAN
// link (looked up in the node's namespace by netlink).
func (c *cluster) checkTasks(t *testing.T, tasks []task) {
	t.Helper()
	lan := map[string]int{}
	for _, n := range c.nodes {
		i, err := nsIfindex(n.ns, n.lan)
		if err != nil {
			t.Fatal(err)
		}
		lan[n.name] = i
	}
	seen := map[string]task{}
	perNode := map[string]int{}
	for _, k := range tasks {
		perNode[k.node.name]++
		if !strings.HasPrefix(k.addr, k.service.prefix) {
			t.Errorf("%s: address not in %s*", k, k.service.prefix)
		}
		if o, dup := seen[k.addr]; dup {
			t.Errorf("address %s twice: %s and %s", k.addr, o, k)
		}
		seen[k.addr] = k
		if k.iflink != lan[k.node.name] {
			t.Errorf("%s: eth0 hangs off ifindex %d, want %d (%s in %s)", k, k.iflink, lan[k.node.name], k.node.lan, k.node.ns)
		}
	}
	t.Logf("%d tasks, %d distinct addresses, tasks per node %v, LAN link indexes %v", len(tasks), len(seen), perNode, lan)
}

// crossPing checks that, on each network, a task on every node reaches a
// task on every other node.
func (c *cluster) crossPing(t *testing.T, tasks []task) {
	t.Helper()
	nets := map[string]map[string][]task{}
	for _, k := range tasks {
		if nets[k.service.net] == nil {
			nets[k.service.net] = map[string][]task{}
		}
		nets[k.service.net][k.node.name] = append(nets[k.service.net][k.node.name], k)
	}
	for net, byNode := range nets {
		for _, a := range c.nodes {
			for _, b := range c.nodes {
				if a == b || len(byNode[a.name]) == 0 || len(byNode[b.name]) == 0 {
					continue
				}
				from, to := byNode[a.name][0], byNode[b.name][len(byNode[b.name])-1]
				if !reachesTask(from, to.addr, 30*time.Second) {
					out, _ := from.node.docker("exec", from.id, "sh", "-c", "ip addr show eth0; ip neigh")
					t.Errorf("on %s: %s does not reach %s\n%s", net, from, to, out)
				}
			}
		}
	}
}

// reachesTask reports whether a task pings addr within timeout.
func reachesTask(from task, addr string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if _, err := from.node.docker("exec", from.id, "ping", "-c", "1", "-W", "1", addr); err == nil {
			return true
		}
	}
	return false
}
