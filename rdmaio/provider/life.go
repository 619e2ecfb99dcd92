package provider

import (
	"sync"
	"sync/atomic"

	"github.com/jiarun/jia/rdmaio"
)

// Life is a device's life lock. The set-up and teardown calls of the
// device's objects run between Begin and End, sharing it; Close takes it
// alone, so that it never tears down what such a call is using. The data
// path (post, poll) does not take it: providers check per-object closed
// flags under the objects' own locks instead.
type Life struct {
	mu     sync.RWMutex
	closed atomic.Bool
}

// Begin enters a set-up or teardown call; it returns rdmaio.ErrClosed,
// without entering, once the device is closed.
func (l *Life) Begin() error {
	l.mu.RLock()
	if l.closed.Load() {
		l.mu.RUnlock()
		return rdmaio.ErrClosed
	}
	return nil
}

// End leaves a call entered with Begin.
func (l *Life) End() { l.mu.RUnlock() }

// Close waits for the calls in progress, marks the device closed and
// returns true with the lock held alone: the caller tears the device down
// and then calls Unlock. It returns false, holding nothing, when the device
// was closed already.
func (l *Life) Close() bool {
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return false
	}
	l.closed.Store(true)
	return true
}

// Unlock releases the lock Close returned with.
func (l *Life) Unlock() { l.mu.Unlock() }

// Closed reports whether Close has run.
func (l *Life) Closed() bool { return l.closed.Load() }

// AsDevice is the body of a provider's Provider.Open: it returns d as an
// rdmaio.Device, or, with an error, a nil rdmaio.Device rather than one
// that holds a nil D.
func AsDevice[D rdmaio.Device](d D, err error) (rdmaio.Device, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}
