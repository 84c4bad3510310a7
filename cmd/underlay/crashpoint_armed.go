//go:build crashpoints

package main

import (
	"log/slog"
	"os"
	"syscall"
)

// crashHook, in test builds (-tags crashpoints) only, kills the process
// with SIGKILL at the crash point named by UNDERLAY_CRASH_AT.
func crashHook(log *slog.Logger) func(string) {
	target := os.Getenv("UNDERLAY_CRASH_AT")
	if target == "" {
		return nil
	}
	log.Warn("crash point armed", "point", target)
	return func(point string) {
		if point == target {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
