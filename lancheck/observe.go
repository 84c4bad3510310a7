package lancheck

import "context"

// Observe gathers what the kernel and the LAN show of n's parent within
// ctx's deadline.
func Observe(ctx context.Context, env Env, n Network) Observations {
	return Observations{} // written next
}
