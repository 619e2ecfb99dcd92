package diff

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

const (
	lo8 = 0x0101010101010101
	hi8 = 0x8080808080808080
)

// ErrCorrupt is wrapped by every error about a malformed encoding.
var ErrCorrupt = errors.New("diff: corrupt encoding")

// load64 reads 8 bytes at b[i:] as a little-endian word.
func load64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i : i+8]) }

// firstZeroByte returns the index (0..7) of the lowest zero byte of x, or 8
// when no byte of x is zero. The borrow of the classic zero-byte test only
// ever marks bytes above a true zero byte, so the lowest mark is exact.
func firstZeroByte(x uint64) int {
	t := (x - lo8) &^ x & hi8
	return bits.TrailingZeros64(t) >> 3 // 64>>3 == 8 when t == 0
}

// nextDiff returns the first offset i >= from where a and b differ, or
// len(a) when they agree from there on.
func nextDiff(a, b []byte, from int) int {
	n := len(a)
	i := from
	// 32 bytes per step while the pages agree: the common case.
	for ; i+32 <= n; i += 32 {
		x0 := load64(a, i) ^ load64(b, i)
		x1 := load64(a, i+8) ^ load64(b, i+8)
		x2 := load64(a, i+16) ^ load64(b, i+16)
		x3 := load64(a, i+24) ^ load64(b, i+24)
		if x0|x1|x2|x3 != 0 {
			break
		}
	}
	for ; i+8 <= n; i += 8 {
		if x := load64(a, i) ^ load64(b, i); x != 0 {
			return i + bits.TrailingZeros64(x)>>3
		}
	}
	for ; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// nextSame returns the first offset i >= from where a and b agree, or len(a)
// when they differ from there on.
func nextSame(a, b []byte, from int) int {
	n := len(a)
	i := from
	// 32 bytes per step while every byte differs (a page rewritten whole).
	for ; i+32 <= n; i += 32 {
		x0 := load64(a, i) ^ load64(b, i)
		x1 := load64(a, i+8) ^ load64(b, i+8)
		x2 := load64(a, i+16) ^ load64(b, i+16)
		x3 := load64(a, i+24) ^ load64(b, i+24)
		t := (x0-lo8)&^x0 | (x1-lo8)&^x1 | (x2-lo8)&^x2 | (x3-lo8)&^x3
		if t&hi8 != 0 {
			break
		}
	}
	for ; i+8 <= n; i += 8 {
		if z := firstZeroByte(load64(a, i) ^ load64(b, i)); z < 8 {
			return i + z
		}
	}
	for ; i < n; i++ {
		if a[i] == b[i] {
			return i
		}
	}
	return n
}

// appendUvarint is binary.AppendUvarint with the one-byte case inlined.
func appendUvarint(dst []byte, v int) []byte {
	if v < 0x80 {
		return append(dst, byte(v))
	}
	return binary.AppendUvarint(dst, uint64(v))
}

// uvarint is binary.Uvarint with the one-byte case inlined.
func uvarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return binary.Uvarint(b)
}

// Append appends the runs where page differs from twin to dst and returns
// the extended slice. page and twin must have the same length.
func Append(dst, page, twin []byte) []byte {
	if len(page) != len(twin) {
		panic(fmt.Sprintf("diff.Append: page is %d bytes, twin %d", len(page), len(twin)))
	}
	end := 0
	for {
		start := nextDiff(page, twin, end)
		if start == len(page) {
			return dst
		}
		stop := nextSame(page, twin, start+1)
		dst = appendUvarint(dst, start-end)
		dst = appendUvarint(dst, stop-start)
		dst = append(dst, page[start:stop]...)
		end = stop
	}
}

// Run is one stretch of changed bytes of a page.
type Run struct {
	Off  int    // offset in the page
	Data []byte // new contents (aliases the encoding)
}

// Walk calls fn for every run of enc in order, checking that each lies
// within a page of pageSize bytes. It stops at the first error of fn.
func Walk(enc []byte, pageSize int, fn func(Run) error) error {
	var err error
	next := runIter{enc: enc, pageSize: pageSize}
	for {
		r, ok := next.next(&err)
		if !ok {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
}

// runIter decodes runs one at a time.
type runIter struct {
	enc      []byte
	i, off   int
	pageSize int
}

// next returns the next run, or false at the end (with *errp set when the
// encoding is corrupt).
func (it *runIter) next(errp *error) (Run, bool) {
	enc, i := it.enc, it.i
	if i >= len(enc) {
		return Run{}, false
	}
	skip, n1 := uvarint(enc[i:])
	if n1 <= 0 {
		*errp = fmt.Errorf("%w: bad run offset at byte %d", ErrCorrupt, i)
		return Run{}, false
	}
	i += n1
	size, n2 := uvarint(enc[i:])
	if n2 <= 0 {
		*errp = fmt.Errorf("%w: bad run length at byte %d", ErrCorrupt, i)
		return Run{}, false
	}
	i += n2
	if size == 0 {
		*errp = fmt.Errorf("%w: empty run at byte %d", ErrCorrupt, i)
		return Run{}, false
	}
	left := uint64(it.pageSize - it.off)
	if skip > left || size > left-skip {
		*errp = fmt.Errorf("%w: run [%d+%d, +%d) outside a %d-byte page", ErrCorrupt, it.off, skip, size, it.pageSize)
		return Run{}, false
	}
	if size > uint64(len(enc)-i) {
		*errp = fmt.Errorf("%w: run of %d bytes truncated at byte %d", ErrCorrupt, size, i)
		return Run{}, false
	}
	off := it.off + int(skip)
	r := Run{Off: off, Data: enc[i : i+int(size)]}
	it.off = off + int(size)
	it.i = i + int(size)
	return r, true
}

// check reports whether enc is a valid encoding for a page of pageSize bytes.
func check(enc []byte, pageSize int) error { return scan(enc, pageSize, nil) }

// scan validates enc for a page of pageSize bytes and, when page is not nil,
// copies every run into it. It is Walk without the function call per run.
func scan(enc []byte, pageSize int, page []byte) error {
	off := 0
	for i := 0; i < len(enc); {
		var skip, size uint64
		if b := enc[i]; b < 0x80 && i+1 < len(enc) && enc[i+1] < 0x80 { // one-byte varints
			skip, size = uint64(b), uint64(enc[i+1])
			i += 2
		} else {
			var n1, n2 int
			skip, n1 = binary.Uvarint(enc[i:])
			if n1 <= 0 {
				return fmt.Errorf("%w: bad run offset at byte %d", ErrCorrupt, i)
			}
			i += n1
			size, n2 = binary.Uvarint(enc[i:])
			if n2 <= 0 {
				return fmt.Errorf("%w: bad run length at byte %d", ErrCorrupt, i)
			}
			i += n2
		}
		if size == 0 {
			return fmt.Errorf("%w: empty run at byte %d", ErrCorrupt, i)
		}
		left := uint64(pageSize - off)
		if skip > left || size > left-skip {
			return fmt.Errorf("%w: run [%d+%d, +%d) outside a %d-byte page", ErrCorrupt, off, skip, size, pageSize)
		}
		if size > uint64(len(enc)-i) {
			return fmt.Errorf("%w: run of %d bytes truncated at byte %d", ErrCorrupt, size, i)
		}
		off += int(skip)
		if page != nil {
			copy(page[off:off+int(size)], enc[i:i+int(size)])
		}
		off += int(size)
		i += int(size)
	}
	return nil
}

// Apply writes the runs of enc into page. It checks the whole encoding
// before writing anything, so a corrupt encoding leaves page unchanged.
func Apply(page, enc []byte) error {
	if err := scan(enc, len(page), nil); err != nil {
		return err
	}
	return scan(enc, len(page), page)
}

// Size returns how many bytes of the page the runs of enc cover, or an error
// when enc is corrupt for a page of pageSize bytes.
func Size(enc []byte, pageSize int) (int, error) {
	total := 0
	err := Walk(enc, pageSize, func(r Run) error { total += len(r.Data); return nil })
	return total, err
}

// entryHeader is the size of a batch entry's header: page and size.
const entryHeader = 8

// AppendPage appends to the batch dst the entry for page number pageNo, with
// the runs where page differs from twin, and returns the extended batch. An
// unchanged page still gets an (empty) entry, so the home learns that the
// page was written.
func AppendPage(dst []byte, pageNo uint32, page, twin []byte) []byte {
	h := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, pageNo)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = Append(dst, page, twin)
	binary.LittleEndian.PutUint32(dst[h+4:], uint32(len(dst)-h-entryHeader))
	return dst
}

// AppendEntry appends to the batch dst an entry of already encoded runs
// (as a Reader returns them) for page number pageNo.
func AppendEntry(dst []byte, pageNo uint32, runs []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, pageNo)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(runs)))
	return append(dst, runs...)
}

// Reader walks the entries of a batch:
//
//	r := diff.NewReader(batch)
//	for r.Next() {
//		use(r.Page(), r.Runs())
//	}
//	if err := r.Err(); err != nil { ... }
type Reader struct {
	b    []byte
	page uint32
	runs []byte
	err  error
}

// NewReader returns a Reader of batch.
func NewReader(batch []byte) *Reader { return &Reader{b: batch} }

// Next advances to the next entry and reports whether there is one.
func (r *Reader) Next() bool {
	if r.err != nil || len(r.b) == 0 {
		return false
	}
	if len(r.b) < entryHeader {
		r.err = fmt.Errorf("%w: truncated entry header (%d bytes)", ErrCorrupt, len(r.b))
		return false
	}
	r.page = binary.LittleEndian.Uint32(r.b)
	size := binary.LittleEndian.Uint32(r.b[4:])
	if uint64(size) > uint64(len(r.b)-entryHeader) {
		r.err = fmt.Errorf("%w: entry of page %d claims %d bytes, %d left", ErrCorrupt, r.page, size, len(r.b)-entryHeader)
		return false
	}
	r.runs = r.b[entryHeader : entryHeader+int(size)]
	r.b = r.b[entryHeader+int(size):]
	return true
}

// Page returns the page number of the current entry.
func (r *Reader) Page() uint32 { return r.page }

// Runs returns the encoded runs of the current entry (see Apply).
func (r *Reader) Runs() []byte { return r.runs }

// Err returns the first error met, if any.
func (r *Reader) Err() error { return r.err }

// Pages returns the page numbers of a batch's entries, appended to dst.
func Pages(dst []uint32, batch []byte) ([]uint32, error) {
	r := NewReader(batch)
	for r.Next() {
		dst = append(dst, r.Page())
	}
	return dst, r.Err()
}

// ApplyBatch applies every entry of batch to the page that page(n) returns
// for page number n. It validates every entry first (page(n) must return a
// page of pageSize bytes, and every run must fit), so a corrupt batch
// changes no page.
func ApplyBatch(batch []byte, pageSize int, page func(n uint32) ([]byte, error)) error {
	r := NewReader(batch)
	for r.Next() {
		if err := check(r.Runs(), pageSize); err != nil {
			return fmt.Errorf("page %d: %w", r.Page(), err)
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	r = NewReader(batch)
	for r.Next() {
		p, err := page(r.Page())
		if err != nil {
			return err
		}
		if len(p) != pageSize {
			return fmt.Errorf("diff: page %d is %d bytes, want %d", r.Page(), len(p), pageSize)
		}
		if err := Apply(p, r.Runs()); err != nil {
			return fmt.Errorf("page %d: %w", r.Page(), err)
		}
	}
	return nil
}
