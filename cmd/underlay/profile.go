package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// profileRates are the sampling rates --profile turns on: every blocking
// event of 10 µs or more, and one mutex contention event in 10.
const (
	blockProfileRate     = 10_000 // ns
	mutexProfileFraction = 10
)

// startProfiles starts a CPU profile into dir/cpu.pprof and turns on block
// and mutex profiling. The returned stop writes the CPU profile and
// dir/block.pprof, dir/mutex.pprof and dir/heap.pprof; serve calls it on its
// way out (a SIGTERM), so a profile covers the daemon's whole run.
func startProfiles(dir string) (stop func() error, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--profile: create %s: %w", dir, err)
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("--profile: start the CPU profile: %w", err)
	}
	runtime.SetBlockProfileRate(blockProfileRate)
	runtime.SetMutexProfileFraction(mutexProfileFraction)
	return func() error {
		pprof.StopCPUProfile()
		errs := []error{cpu.Close()}
		for _, name := range []string{"block", "mutex", "heap"} {
			errs = append(errs, writeProfile(filepath.Join(dir, name+".pprof"), name))
		}
		return errors.Join(errs...)
	}, nil
}

func writeProfile(path, name string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
