// Package diff encodes the changes a rank made to a page of distributed
// shared memory as runs of bytes against the page's twin (the copy taken when
// the rank first wrote to the page in the current interval), and batches the
// diffs of several pages into one message for their home rank.
//
// # Runs
//
// Append compares a page with its twin eight bytes at a time and emits one
// run for every maximal stretch of bytes that differ. JIAJIA compares
// 4-byte words and sends whole words (its Diffunit); a run here is trimmed to
// the exact bytes that changed, so two ranks may write neighbouring bytes of
// one word under different locks (or between barriers, one rank each) and the
// home still ends with both writes. A run never contains a byte that equals
// the twin's byte at the same offset.
//
// The encoding of one page is a sequence of runs, each
//
//	skip   uvarint  bytes since the end of the previous run (the page start for the first)
//	n      uvarint  length of the run, at least 1
//	data   n bytes  the new contents
//
// An unchanged page encodes to zero bytes.
//
// # Batches
//
// A batch is a sequence of page entries, each
//
//	page   uint32 little endian  page number
//	size   uint32 little endian  length of the runs that follow
//	runs   size bytes            as above
//
// AppendPage adds an entry; a Reader walks a batch; ApplyBatch applies a whole
// batch through a lookup of the pages' memory.
package diff
