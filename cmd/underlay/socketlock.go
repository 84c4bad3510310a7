package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// lockSocket takes the lock that makes one daemon the owner of a socket
// path: a write lock on "<socket>.lock", held until the returned file is
// closed or the process ends (kill -9 included). It is taken before the
// socket is checked and before any state is touched, so that of two
// daemons started at once on one socket (each with its own state file,
// which bbolt's own lock does not cover) exactly one goes on and the other
// exits naming it, instead of both passing the "socket free" check and the
// later silently taking the path.
//
// The lock is a POSIX record lock (fcntl F_SETLK), not flock: the kernel
// then names the holder (F_GETLK), so the refusal's PID is never missing or
// left by an earlier holder. Such a lock is released when the process
// closes any descriptor of the file, so nothing else in the daemon may open
// it. The file is opened O_CLOEXEC and left in place at exit: removing it
// would race a new holder, and a file without a holder locks nothing. The
// holder's PID is also written into it, for an operator's eyes.
func lockSocket(socket string, log *slog.Logger) (*os.File, error) {
	path := socket + ".lock"
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, fmt.Errorf("create the socket's directory for --socket %s: %w", socket, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s, the lock that keeps a second daemon off --socket %s: %w: its directory must be writable", path, socket, err)
	}
	// A holder may end between a refused F_SETLK and F_GETLK: try again.
	for range 3 {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
		err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
		if err == nil {
			if err := writePid(f); err != nil {
				// The lock holds without it; only the operator's view lacks it.
				log.Warn("could not write this daemon's PID into the socket's lock file; the lock holds all the same", "lock", path, "error", err)
			}
			log.Debug("socket lock taken", "lock", path)
			return f, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			f.Close()
			return nil, fmt.Errorf("lock %s for --socket %s: %w", path, socket, err)
		}
		held := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
		if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &held); err != nil {
			f.Close()
			return nil, fmt.Errorf("ask which process holds %s for --socket %s: %w", path, socket, err)
		}
		if held.Type == unix.F_UNLCK {
			continue
		}
		f.Close()
		holder := "pid " + strconv.Itoa(int(held.Pid))
		if held.Pid <= 0 {
			holder = "a process in another PID namespace (its PID there is in " + path + ")"
		}
		return nil, fmt.Errorf("socket %s is in use by another underlay daemon, %s, which holds %s: stop that daemon first, or give this one another --socket (and its own --state)", socket, holder, path)
	}
	f.Close()
	return nil, fmt.Errorf("lock %s for --socket %s: other processes took and released it three times while this daemon tried: start one daemon at a time on one socket", path, socket)
}

// writePid replaces the lock file's content with this process's PID.
func writePid(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}
