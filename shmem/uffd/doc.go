// Package uffd is a small wrapper of Linux userfaultfd(2) for the DSM's
// page-fault engine: open a descriptor, register a range for missing and
// write-protect faults, read fault messages, and resolve them with
// UFFDIO_COPY (optionally write-protected), UFFDIO_ZEROPAGE,
// UFFDIO_WRITEPROTECT, UFFDIO_CONTINUE and UFFDIO_WAKE. It needs no cgo.
//
// Every resolving call acts on the memory of the process that registered the
// range, whichever process makes it: a descriptor passed to another process
// (SendFDs/RecvFDs, SCM_RIGHTS over a Unix socket) lets that process serve
// the faults. That is how the DSM avoids the in-process hazard described in
// package shmem: a thread blocked in a fault keeps its Go P, so a handler
// goroutine of the same process may never get to run.
//
// Invalidation is done by the process that owns the memory with Zap
// (madvise MADV_DONTNEED, for private anonymous memory) or by anyone holding
// the region's memfd with PunchHole (fallocate FALLOC_FL_PUNCH_HOLE, for
// shared memory, where MADV_DONTNEED would keep the page in the page cache
// and the next access would not fault).
package uffd
