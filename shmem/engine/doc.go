// Package engine drives the DSM protocol (package protocol) with real
// memory and real messages. This first part is the Executor, which carries
// out a protocol.Machine's actions against a Memory (the pages of a rank)
// and a Transport (the other ranks), and owns the twins and the diff
// encoding. The randomized checker of package protocol runs it on
// simulated memory; the pager runs it on a userfaultfd region.
package engine
