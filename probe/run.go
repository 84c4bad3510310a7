package probe

import (
	"context"
	"fmt"
	"time"

	"github.com/mdlayher/packet"
)

// readBuffer is the receive buffer of a probe: larger than any NS or NA
// on an Ethernet LAN with a 9000-byte MTU (a longer frame is truncated,
// fails its checksum and is ignored).
const readBuffer = 9216

// sendAt is when the i-th probe (from 0) of a probe with budget is sent,
// counted from its start: at 0, budget/3, 2·budget/3.
func sendAt(i int, budget time.Duration) time.Duration {
	return budget / probes * time.Duration(i)
}

// run sends frame to broadcast at the times sendAt gives, reads what c
// receives until budget has passed since the first send, and returns the
// first *ConflictError conflict finds in a frame, nil at the end of
// budget, or the error that ended it (ctx's, or the socket's). It closes
// c, without waiting for the kernel's close (CloseLater): a container's
// start waits for the probe's budget and nothing more.
func run(ctx context.Context, c conn, frame []byte, budget time.Duration, conflict func([]byte) *ConflictError) error {
	if err := ctx.Err(); err != nil {
		c.CloseLater()
		return fmt.Errorf("not started: %w", err)
	}
	closing := make(chan struct{})
	found := make(chan error, 1) // the reader's only result
	go func() {
		buf := make([]byte, readBuffer)
		for {
			n, _, err := c.ReadFrom(buf)
			select {
			case <-closing:
				return
			default:
			}
			if err != nil {
				found <- fmt.Errorf("receive: %w: check that the link is up", err)
				return
			}
			if ce := conflict(buf[:n]); ce != nil {
				found <- ce
				return
			}
		}
	}()
	defer func() {
		close(closing) // the reader ends at the close, sending nothing more
		c.CloseLater()
	}()

	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for sent := 0; ; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ended after %s of its %s budget, %d of %d probes sent: %w", time.Since(start).Round(time.Millisecond), budget, sent, probes, ctx.Err())
		case err := <-found:
			return err
		case <-timer.C:
		}
		if sent == probes {
			select {
			case err := <-found: // came at the very end: still counts
				return err
			default:
				return nil
			}
		}
		if _, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: frame[0:6]}); err != nil {
			return fmt.Errorf("send probe %d of %d: %w: check that the link is up", sent+1, probes, err)
		}
		sent++
		next := budget
		if sent < probes {
			next = sendAt(sent, budget)
		}
		timer.Reset(time.Until(start.Add(next)))
	}
}

// repeat sends frame count times, interval apart, the first at once, and
// stops early at the end of ctx.
func repeat(ctx context.Context, c conn, frame []byte, count int, interval time.Duration) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("not started: %w", err)
	}
	for i := range count {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ended after %d of %d messages: %w", i, count, ctx.Err())
		case <-timer.C:
		}
		if _, err := c.WriteTo(frame, &packet.Addr{HardwareAddr: frame[0:6]}); err != nil {
			return fmt.Errorf("send message %d of %d: %w: check that the link is up", i+1, count, err)
		}
		timer.Reset(time.Until(start.Add(interval * time.Duration(i+1))))
	}
	return nil
}
