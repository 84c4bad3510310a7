package control

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// CheckDockerHost refuses a --docker-host (or $DOCKER_HOST) value that
// names no Docker API: it must be unix:// followed by an absolute socket
// path, or tcp://HOST:PORT. Both `underlay serve` and the ls/doctor
// commands check it before anything is asked, so a typo is an error and
// not a Docker that silently "could not be asked".
func CheckDockerHost(v string) error {
	switch {
	case strings.HasPrefix(v, "unix://"):
		path := strings.TrimPrefix(v, "unix://")
		if path == "" {
			return fmt.Errorf("--docker-host %q has no socket path: use unix:///var/run/docker.sock (unix:// followed by the absolute path of Docker's socket)", v)
		}
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("--docker-host %q: the socket path %q is not absolute: use unix:///%s (three slashes: unix:// then the path)", v, path, path)
		}
		return nil
	case strings.HasPrefix(v, "tcp://"):
		addr := strings.TrimPrefix(v, "tcp://")
		addr, _, _ = strings.Cut(addr, "/")
		if addr == "" {
			return fmt.Errorf("--docker-host %q has no address: use tcp://HOST:PORT, for example tcp://127.0.0.1:2375", v)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return fmt.Errorf("--docker-host %q: %q is not HOST:PORT: use tcp://HOST:PORT, for example tcp://127.0.0.1:2375", v, addr)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("--docker-host %q: port %q is not a TCP port (1-65535): use tcp://HOST:PORT, for example tcp://127.0.0.1:2375", v, port)
		}
		return nil
	}
	return fmt.Errorf("--docker-host %q is not valid: use unix:///path/to/docker.sock (or tcp://HOST:PORT)", v)
}
