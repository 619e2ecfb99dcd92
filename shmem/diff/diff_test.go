package diff

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// refRuns is the byte-at-a-time definition of the runs Append must emit:
// every maximal stretch of bytes where page and twin differ.
func refRuns(page, twin []byte) []Run {
	var runs []Run
	for i := 0; i < len(page); {
		if page[i] == twin[i] {
			i++
			continue
		}
		j := i
		for j < len(page) && page[j] != twin[j] {
			j++
		}
		runs = append(runs, Run{Off: i, Data: page[i:j]})
		i = j
	}
	return runs
}

func decodeRuns(t testing.TB, enc []byte, pageSize int) []Run {
	t.Helper()
	var runs []Run
	if err := Walk(enc, pageSize, func(r Run) error { runs = append(runs, r); return nil }); err != nil {
		t.Fatalf("Walk: %v", err)
	}
	return runs
}

func sameRuns(a, b []Run) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Off != b[i].Off || !bytes.Equal(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

// checkRoundTrip checks every property of Append on one pair.
func checkRoundTrip(t testing.TB, page, twin []byte) {
	t.Helper()
	enc := Append(nil, page, twin)
	got := decodeRuns(t, enc, len(page))
	if want := refRuns(page, twin); !sameRuns(got, want) {
		t.Fatalf("runs = %v, want %v", got, want)
	}
	out := bytes.Clone(twin)
	if err := Apply(out, enc); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !bytes.Equal(out, page) {
		t.Fatalf("twin+diff != page")
	}
}

func TestAppendRuns(t *testing.T) {
	mk := func(n int, set map[int]byte) []byte {
		b := make([]byte, n)
		for i, v := range set {
			b[i] = v
		}
		return b
	}
	tests := []struct {
		name      string
		page      []byte
		twin      []byte
		wantRuns  int
		wantBytes int
	}{
		{"unchanged page encodes to nothing", mk(4096, nil), mk(4096, nil), 0, 0},
		{"one byte", mk(4096, map[int]byte{100: 1}), mk(4096, nil), 1, 1},
		{"first and last byte", mk(4096, map[int]byte{0: 1, 4095: 1}), mk(4096, nil), 2, 2},
		{"run across a word boundary", mk(64, map[int]byte{6: 1, 7: 1, 8: 1, 9: 1}), mk(64, nil), 1, 4},
		{"neighbouring bytes of one word stay separate when one is unchanged", mk(16, map[int]byte{0: 1, 2: 1}), mk(16, nil), 2, 2},
		{"byte written with the value the twin has is not sent", mk(16, map[int]byte{3: 7}), mk(16, map[int]byte{3: 7}), 0, 0},
		{"short page below one word", mk(5, map[int]byte{4: 9}), mk(5, nil), 1, 1},
		{"whole page", bytes.Repeat([]byte{1}, 4096), mk(4096, nil), 1, 4096},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkRoundTrip(t, tc.page, tc.twin)
			enc := Append(nil, tc.page, tc.twin)
			runs := decodeRuns(t, enc, len(tc.page))
			n, _ := Size(enc, len(tc.page))
			if len(runs) != tc.wantRuns || n != tc.wantBytes {
				t.Fatalf("got %d runs of %d bytes, want %d runs of %d bytes", len(runs), n, tc.wantRuns, tc.wantBytes)
			}
		})
	}
}

// TestByteFalseSharing is the reason runs are byte-exact: two ranks write
// neighbouring bytes of one 8-byte word from the same starting page, and the
// home applies both diffs in either order.
func TestByteFalseSharing(t *testing.T) {
	base := make([]byte, 64)
	a, b := bytes.Clone(base), bytes.Clone(base)
	a[8] = 0xaa // rank A, under lock 1
	b[9] = 0xbb // rank B, under lock 2
	for _, order := range [][2][]byte{{a, b}, {b, a}} {
		home := bytes.Clone(base)
		for _, w := range order {
			if err := Apply(home, Append(nil, w, base)); err != nil {
				t.Fatal(err)
			}
		}
		if home[8] != 0xaa || home[9] != 0xbb {
			t.Fatalf("home = % x, want both writes", home[8:10])
		}
	}
}

func TestRandomPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for it := 0; it < 2000; it++ {
		n := rng.IntN(300)
		if it%10 == 0 {
			n = 4096
		}
		twin := make([]byte, n)
		for i := range twin {
			twin[i] = byte(rng.IntN(3))
		}
		page := bytes.Clone(twin)
		density := rng.Float64()
		for i := range page {
			if rng.Float64() < density {
				page[i] = byte(rng.IntN(3))
			}
		}
		checkRoundTrip(t, page, twin)
	}
}

func TestApplyRejectsCorrupt(t *testing.T) {
	page := make([]byte, 16)
	tests := []struct {
		name string
		enc  []byte
	}{
		{"truncated offset", []byte{0x80}},
		{"missing length", []byte{0}},
		{"empty run", []byte{0, 0}},
		{"run past the page end", []byte{10, 7, 1, 2, 3, 4, 5, 6, 7}},
		{"offset past the page end", []byte{17, 1, 1}},
		{"data truncated", []byte{0, 4, 1, 2}},
		{"huge length", binary.AppendUvarint([]byte{0}, 1<<62)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := bytes.Clone(page)
			err := Apply(page, tc.enc)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Apply = %v, want ErrCorrupt", err)
			}
			if !bytes.Equal(page, before) {
				t.Fatal("a corrupt diff changed the page")
			}
		})
	}
}

func TestBatch(t *testing.T) {
	const ps = 256
	twins := map[uint32][]byte{}
	pages := map[uint32][]byte{}
	var batch []byte
	for _, n := range []uint32{7, 3, 1 << 30} {
		tw := make([]byte, ps)
		pg := bytes.Clone(tw)
		pg[n%ps] = byte(n) | 1
		twins[n], pages[n] = tw, pg
		batch = AppendPage(batch, n, pg, tw)
	}
	batch = AppendPage(batch, 9, make([]byte, ps), make([]byte, ps)) // written, unchanged
	got, err := Pages(nil, batch)
	if err != nil || fmt.Sprint(got) != "[7 3 1073741824 9]" {
		t.Fatalf("Pages = %v, %v", got, err)
	}
	homes := map[uint32][]byte{7: make([]byte, ps), 3: make([]byte, ps), 1 << 30: make([]byte, ps), 9: make([]byte, ps)}
	err = ApplyBatch(batch, ps, func(n uint32) ([]byte, error) { return homes[n], nil })
	if err != nil {
		t.Fatal(err)
	}
	for n, pg := range pages {
		if !bytes.Equal(homes[n], pg) {
			t.Fatalf("page %d not applied", n)
		}
	}
	// A corrupt last entry must leave every page untouched.
	bad := append(bytes.Clone(batch), 1, 0, 0, 0, 2, 0, 0, 0, 0, 0)
	fresh := map[uint32][]byte{7: make([]byte, ps), 3: make([]byte, ps), 1 << 30: make([]byte, ps), 9: make([]byte, ps), 1: make([]byte, ps)}
	if err := ApplyBatch(bad, ps, func(n uint32) ([]byte, error) { return fresh[n], nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ApplyBatch(corrupt) = %v", err)
	}
	for n, p := range fresh {
		if !bytes.Equal(p, make([]byte, ps)) {
			t.Fatalf("corrupt batch changed page %d", n)
		}
	}
	if _, err := Pages(nil, []byte{1, 2, 3}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Pages(truncated) = %v", err)
	}
}

// FuzzRoundTrip: for any twin and page, twin + Append(page, twin) == page,
// the runs are exactly the differing bytes, and the encoding is no longer
// than 1.5 times the page plus a few bytes.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte("hello, world; twin of a page"), []byte("hellO, world; twin of a pagE"))
	f.Add(make([]byte, 64), bytes.Repeat([]byte{0, 1}, 32))
	f.Fuzz(func(t *testing.T, twin, page []byte) {
		p := make([]byte, len(twin))
		copy(p, page)
		checkRoundTrip(t, p, twin)
		if enc := Append(nil, p, twin); len(enc) > len(p)*3/2+3 {
			t.Fatalf("encoding of %d bytes for a %d-byte page", len(enc), len(p))
		}
	})
}

// FuzzApply: Apply never panics on arbitrary input, and when it succeeds it
// changed only bytes covered by runs.
func FuzzApply(f *testing.F) {
	f.Add(uint16(16), []byte{0, 1, 5})
	f.Add(uint16(4096), Append(nil, bytes.Repeat([]byte{9}, 4096), make([]byte, 4096)))
	f.Add(uint16(8), []byte{0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, size uint16, enc []byte) {
		page := make([]byte, int(size)%8192)
		for i := range page {
			page[i] = 0xee
		}
		covered := make([]bool, len(page))
		werr := Walk(enc, len(page), func(r Run) error {
			for i := range r.Data {
				covered[r.Off+i] = true
			}
			return nil
		})
		err := Apply(page, enc)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Apply = %v but Walk = %v", err, werr)
		}
		for i, b := range page {
			if !covered[i] && b != 0xee {
				t.Fatalf("byte %d changed outside every run", i)
			}
		}
		_, _ = Pages(nil, enc)
		_ = ApplyBatch(enc, 64, func(uint32) ([]byte, error) { return make([]byte, 64), nil })
	})
}

func benchPair(kind string, n int) (page, twin []byte) {
	rng := rand.New(rand.NewPCG(3, 4))
	twin = make([]byte, n)
	for i := range twin {
		twin[i] = byte(rng.Uint32())
	}
	page = bytes.Clone(twin)
	switch kind {
	case "unchanged":
	case "one-word":
		page[n/2] ^= 0xff
	case "every-8th-word": // one float64 in eight, e.g. a column update
		for i := 0; i+8 <= n; i += 64 {
			binary.LittleEndian.PutUint64(page[i:], ^binary.LittleEndian.Uint64(page[i:]))
		}
	case "alternate-words":
		for i := 0; i+8 <= n; i += 16 {
			binary.LittleEndian.PutUint64(page[i:], ^binary.LittleEndian.Uint64(page[i:]))
		}
	case "all":
		for i := range page {
			page[i] ^= 0xff
		}
	}
	return page, twin
}

var benchKinds = []string{"unchanged", "one-word", "every-8th-word", "alternate-words", "all"}

// BenchmarkAppend measures diffing a 4 KiB page; MB/s counts page bytes
// scanned.
func BenchmarkAppend(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			page, twin := benchPair(kind, 4096)
			dst := make([]byte, 0, 8192)
			b.SetBytes(4096)
			b.ReportAllocs()
			for b.Loop() {
				dst = Append(dst[:0], page, twin)
			}
			b.ReportMetric(float64(len(dst)), "enc-bytes")
		})
	}
}

// BenchmarkAppendBytewise is the naive byte-at-a-time loop, for comparison.
func BenchmarkAppendBytewise(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			page, twin := benchPair(kind, 4096)
			dst := make([]byte, 0, 8192)
			b.SetBytes(4096)
			for b.Loop() {
				dst = dst[:0]
				end := 0
				for i := 0; i < len(page); {
					if page[i] == twin[i] {
						i++
						continue
					}
					j := i + 1
					for j < len(page) && page[j] != twin[j] {
						j++
					}
					dst = binary.AppendUvarint(dst, uint64(i-end))
					dst = binary.AppendUvarint(dst, uint64(j-i))
					dst = append(dst, page[i:j]...)
					end, i = j, j
				}
			}
		})
	}
}

func BenchmarkApply(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			page, twin := benchPair(kind, 4096)
			enc := Append(nil, page, twin)
			out := bytes.Clone(twin)
			b.SetBytes(4096)
			b.ReportAllocs()
			for b.Loop() {
				if err := Apply(out, enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
