module github.com/underlay-net/underlay

go 1.26.8

require (
	github.com/docker/go-connections v0.8.2
	github.com/docker/go-plugins-helpers v0.0.0-20240701071450-45e2431495c8
	github.com/vishvananda/netlink v1.3.1
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sync v0.25.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/Microsoft/go-winio v0.6.4 // indirect
	github.com/coreos/go-systemd v0.0.0-20191104093116-d3cd4ed1dbcf // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
)
