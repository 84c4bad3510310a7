package probe

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeConn is a packet socket in memory: it records what is written,
// when, and hands reads what the test feeds it.
type fakeConn struct {
	start    time.Time
	in       chan []byte
	readErr  chan error
	writeErr error
	onWrite  func(n int) // called after the n-th write (from 1)
	// closeTakes is how long the close takes after CloseLater, as the
	// kernel's does (an RCU grace period).
	closeTakes time.Duration

	mu     sync.Mutex
	sent   []time.Duration
	frames [][]byte
	once   sync.Once
	closed chan struct{}
}

func newFakeConn() *fakeConn {
	return &fakeConn{start: time.Now(), in: make(chan []byte, 8), readErr: make(chan error, 1), closed: make(chan struct{})}
}

func (f *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case p := <-f.in:
		return copy(b, p), nil, nil
	case err := <-f.readErr:
		return 0, nil, err
	case <-f.closed:
		return 0, nil, net.ErrClosed
	}
}

func (f *fakeConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	if f.writeErr != nil {
		return 0, f.writeErr
	}
	f.mu.Lock()
	f.sent = append(f.sent, time.Since(f.start))
	f.frames = append(f.frames, append([]byte(nil), b...))
	n := len(f.sent)
	f.mu.Unlock()
	if f.onWrite != nil {
		f.onWrite(n)
	}
	return len(b), nil
}

func (f *fakeConn) CloseLater() {
	go func() {
		time.Sleep(f.closeTakes)
		f.once.Do(func() { close(f.closed) })
	}()
}

// waitClosed fails t unless c is closed within a second.
func (f *fakeConn) waitClosed(t *testing.T) {
	t.Helper()
	select {
	case <-f.closed:
	case <-time.After(time.Second):
		t.Error("the socket is still open a second after the probe")
	}
}

func (f *fakeConn) times() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sent...)
}

func arpCheck(b []byte) *ConflictError { return arpConflict(b, testMAC, testAddr4) }

var probeFrame = arpFrame(testMAC, netip.IPv4Unspecified(), testAddr4)

// Bounds for timings on a loaded machine: early never, late by this much.
const slack = 400 * time.Millisecond

func TestRunNoAnswerTakesTheBudget(t *testing.T) {
	c := newFakeConn()
	c.in <- arpPkt(arpRequest, otherMAC, "198.18.0.1", "198.18.0.2") // unrelated traffic
	budget := 300 * time.Millisecond
	start := time.Now()
	if err := run(context.Background(), c, probeFrame, budget, arpCheck); err != nil {
		t.Fatalf("no answer: %v, want nil", err)
	}
	took := time.Since(start)
	if took < budget || took > budget+slack {
		t.Errorf("took %s, want the budget %s", took, budget)
	}
	sent := c.times()
	if len(sent) != probes {
		t.Fatalf("%d probes sent, want %d", len(sent), probes)
	}
	for i, at := range sent {
		want := sendAt(i, budget)
		if at < want-time.Millisecond || at > want+slack {
			t.Errorf("probe %d sent at %s, want %s", i+1, at, want)
		}
	}
	c.waitClosed(t)
}

// TestRunDoesNotWaitForTheClose: the kernel's close of a packet socket
// takes an RCU grace period; a probe's answer comes at the end of its
// budget all the same, and the socket closes after it.
func TestRunDoesNotWaitForTheClose(t *testing.T) {
	c := newFakeConn()
	c.closeTakes = 2 * time.Second
	budget := 300 * time.Millisecond
	start := time.Now()
	if err := run(context.Background(), c, probeFrame, budget, arpCheck); err != nil {
		t.Fatalf("no answer: %v, want nil", err)
	}
	if took := time.Since(start); took > budget+slack {
		t.Errorf("took %s with a close of %s: the probe waited for it", took, c.closeTakes)
	}
	select {
	case <-c.closed:
		t.Fatal("closed before its close took its time: the fake is wrong")
	default:
	}
	select {
	case <-c.closed:
	case <-time.After(c.closeTakes + 2*time.Second):
		t.Error("the socket never closed")
	}
}

func TestRunConflictEndsAtOnce(t *testing.T) {
	c := newFakeConn()
	c.onWrite = func(n int) {
		if n == 1 {
			c.in <- arpPkt(arpReply, otherMAC, "198.18.0.5", "0.0.0.0")
		}
	}
	start := time.Now()
	err := run(context.Background(), c, probeFrame, 3*time.Second, arpCheck)
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.MAC.String() != otherMAC.String() {
		t.Fatalf("answered: %v, want a conflict with %s", err, otherMAC)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %s: a conflict must end the probe at once", took)
	}
}

func TestRunContextEndsIt(t *testing.T) {
	c := newFakeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := run(ctx, c, probeFrame, 5*time.Second, arpCheck)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ended by its context: %v, want context.DeadlineExceeded wrapped", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %s after its context ended at 100ms", took)
	}
	if !strings.Contains(err.Error(), "1 of 3 probes sent") {
		t.Errorf("error %q does not say how far it got", err)
	}

	done, stop := context.WithCancel(context.Background())
	stop()
	c = newFakeConn()
	if err := run(done, c, probeFrame, time.Second, arpCheck); !errors.Is(err, context.Canceled) || len(c.times()) != 0 {
		t.Errorf("a cancelled context: %v after %d probes, want context.Canceled and none sent", err, len(c.times()))
	}
}

func TestRunSocketErrors(t *testing.T) {
	c := newFakeConn()
	c.writeErr = errors.New("sendto: network is down")
	if err := run(context.Background(), c, probeFrame, time.Second, arpCheck); err == nil || !strings.Contains(err.Error(), "network is down") {
		t.Errorf("send failing: %v, want its error", err)
	}
	c = newFakeConn()
	c.readErr <- errors.New("recvfrom: network is down")
	if err := run(context.Background(), c, probeFrame, time.Second, arpCheck); err == nil || !strings.Contains(err.Error(), "receive") {
		t.Errorf("receive failing: %v, want its error", err)
	}
}

func TestRepeat(t *testing.T) {
	c := newFakeConn()
	interval := 80 * time.Millisecond
	if err := repeat(context.Background(), c, probeFrame, 3, interval); err != nil {
		t.Fatal(err)
	}
	sent := c.times()
	if len(sent) != 3 {
		t.Fatalf("%d sent, want 3", len(sent))
	}
	for i, at := range sent {
		want := interval * time.Duration(i)
		if at < want-time.Millisecond || at > want+slack {
			t.Errorf("message %d sent at %s, want %s", i+1, at, want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	c = newFakeConn()
	c.onWrite = func(n int) { cancel() }
	err := repeat(ctx, c, probeFrame, 3, time.Hour)
	if !errors.Is(err, context.Canceled) || len(c.times()) != 1 {
		t.Errorf("cancelled after the first: %v after %d, want context.Canceled after 1", err, len(c.times()))
	}
}
