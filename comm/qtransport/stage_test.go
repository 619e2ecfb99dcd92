package qtransport_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/rdmaio/shm"
)

// TestStage: staging memory registered on one rank is read by another,
// and Close frees it: no segment of the job is left in the shm directory.
func TestStage(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	sinks := []*sink{newSink(2), newSink(2)}
	b, err := trs[1].AllocStage(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 256<<10 {
		t.Fatalf("AllocStage(256 KiB) gave %d bytes", len(b))
	}
	for i := range b {
		b[i] = byte(i * 13)
	}
	reg, err := trs[1].Register(b[4096:])
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, len(b)-4096)
	if err := trs[0].Read(1, reg, [][]byte{local[:1000], local[1000:]}, 7); err != nil {
		t.Fatal(err)
	}
	pollAll(t, trs, sinks, func() bool { _, ok := sinks[0].comps[7]; return ok })
	if err := sinks[0].comps[7]; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local, b[4096:]) {
		t.Fatal("read of staging memory: wrong data")
	}
	if err := trs[1].Deregister(reg); err != nil {
		t.Fatal(err)
	}
	// A second buffer, never registered, is freed at Close too.
	if _, err := trs[1].AllocStage(64 << 10); err != nil {
		t.Fatal(err)
	}
	for _, tr := range trs {
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(shm.DefaultDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), shm.SegmentPrefix+shm.JobTag(testJob)) {
			t.Errorf("segment %s left after Close", e.Name())
		}
	}
	if _, err := trs[0].AllocStage(1024); err == nil {
		t.Error("AllocStage after Close succeeded")
	}
}
