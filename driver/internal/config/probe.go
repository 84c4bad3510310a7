package config

// Docker's own option names and ranges for announcements.
const (
	OptAdvertiseNMsgs = "com.docker.network.advertise_addr_nmsgs"
	OptAdvertiseMs    = "com.docker.network.advertise_addr_ms"
	LabelEnableIPv4   = "com.docker.network.enable_ipv4"
)
