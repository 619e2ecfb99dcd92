package rdmaio

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

type nopProvider struct{ err error }

func (p nopProvider) Open(Config) (Device, error) { return nil, p.err }

// probedProvider needs hardware: its Probe says whether there is any.
type probedProvider struct{ nopProvider }

func (p probedProvider) Probe() error { return p.err }

var registerOnce, registerProbedOnce sync.Once

func TestUsable(t *testing.T) {
	registerProbedOnce.Do(func() {
		Register("test-probed-none", probedProvider{nopProvider{err: ErrNoDevice}})
		Register("test-probed-some", probedProvider{})
		Register("test-unprobed", nopProvider{err: ErrNoDevice})
	})
	if err := Usable("test-probed-none"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Usable of a provider whose probe finds no device: %v", err)
	}
	if err := Usable("test-probed-some"); err != nil {
		t.Errorf("Usable of a provider whose probe finds a device: %v", err)
	}
	// Providers without a probe need no hardware: usable once registered.
	if err := Usable("test-unprobed"); err != nil {
		t.Errorf("Usable of a provider without a probe: %v", err)
	}
	if err := Usable("no-such-provider"); !errors.Is(err, ErrUnknownProvider) {
		t.Errorf("Usable of an unknown provider: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	registerOnce.Do(func() { Register("test-nodev", nopProvider{err: ErrNoDevice}) })
	if !slices.Contains(Providers(), "test-nodev") {
		t.Fatalf("Providers() = %v", Providers())
	}
	if _, err := Open("test-nodev", Config{}); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("open: %v", err)
	}
	if _, err := Open("no-such-provider", Config{}); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("open unknown: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatalf("duplicate Register did not panic")
			}
		}()
		Register("test-nodev", nopProvider{})
	}()
}

func TestStrings(t *testing.T) {
	for s, want := range map[interface{ String() string }]string{
		StatusSuccess: "SUCCESS", StatusLocLenErr: "LOC_LEN_ERR", StatusLocProtErr: "LOC_PROT_ERR",
		StatusWRFlushErr: "WR_FLUSH_ERR", StatusRemInvReqErr: "REM_INV_REQ_ERR", StatusRemAccessErr: "REM_ACCESS_ERR",
		StatusRNRRetryExcErr: "RNR_RETRY_EXC_ERR", StatusRetryExcErr: "RETRY_EXC_ERR", Status(99): "Status(99)",
		OpSendImm: "SEND_WITH_IMM", OpAtomicCmpSwp: "ATOMIC_CMP_AND_SWP", Opcode(9): "Opcode(9)",
		WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM", WCOpcode(7): "WCOpcode(7)",
		RC: "RC", UD: "UD", StateRTS: "RTS", StateErr: "ERR", QPState(9): "QPState(9)",
		AccessLocalWrite | AccessRemoteRead: "local-write|remote-read", Access(0): "none", Access(1 << 5): "0x20",
	} {
		if got := s.String(); got != want {
			t.Errorf("%T %v: String() = %q, want %q", s, s, got, want)
		}
	}
	// Every status a provider can return has a verbs name.
	for s := Status(0); s < 22; s++ {
		if name := s.String(); name == "" {
			t.Errorf("status %d has no name", s)
		}
	}
	wc := WorkCompletion{ID: 3, QPN: 9, Opcode: WCRDMAWrite, Status: StatusRemAccessErr, VendorErr: 13}
	var e *WCError
	if err := wc.Err(); !errors.As(err, &e) || e.Status != StatusRemAccessErr || err.Error() != "rdmaio: qp 9: work request 3 (RDMA_WRITE): REM_ACCESS_ERR (vendor error 13)" {
		t.Fatalf("Err() = %v", err)
	}
	if (&WorkCompletion{}).Err() != nil {
		t.Fatalf("success has an error")
	}
	if !(AccessLocalWrite | AccessRemoteWrite).Valid() || AccessRemoteWrite.Valid() || Access(64).Valid() {
		t.Fatalf("Access.Valid")
	}
	if !OpRDMARead.IsOneSided() || OpSend.IsOneSided() || !OpRDMAWriteImm.ConsumesRecv() || OpRDMAWrite.ConsumesRecv() {
		t.Fatalf("opcode classes")
	}
}
