// Package dockerid holds the one spelling of a Docker ID in messages.
package dockerid

// ShortLen is how many characters of a Docker ID `docker network ls` shows.
const ShortLen = 12

// Short is the 12-character form of a Docker ID used in messages.
func Short(id string) string {
	if len(id) > ShortLen {
		return id[:ShortLen]
	}
	return id
}
