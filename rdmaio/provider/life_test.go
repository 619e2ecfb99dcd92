package provider

import (
	"errors"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

func TestLife(t *testing.T) {
	var l Life
	if err := l.Begin(); err != nil {
		t.Fatalf("Begin on an open device: %v", err)
	}
	closed := make(chan bool)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was in progress")
	case <-time.After(20 * time.Millisecond):
	}
	l.End()
	if !<-closed {
		t.Fatal("first Close returned false")
	}
	if !l.Closed() {
		t.Fatal("Closed is false after Close")
	}
	l.Unlock()
	if err := l.Begin(); !errors.Is(err, rdmaio.ErrClosed) {
		t.Fatalf("Begin after Close: %v, want ErrClosed", err)
	}
	if l.Close() {
		t.Fatal("second Close returned true")
	}
}

// nilDevice is a provider's device type for TestAsDevice.
type nilDevice struct{ rdmaio.Device }

func TestAsDevice(t *testing.T) {
	fail := errors.New("open failed")
	if d, err := AsDevice((*nilDevice)(nil), fail); d != nil || err != fail {
		t.Fatalf("AsDevice with an error: %v (%T), %v", d, d, err)
	}
	want := &nilDevice{}
	if d, err := AsDevice(want, nil); d != want || err != nil {
		t.Fatalf("AsDevice: %v, %v", d, err)
	}
}
