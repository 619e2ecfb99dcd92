// Package launcher is everything jiarun does: it reads host lists (hosts.toml,
// MPI-style hostfiles, -H), maps ranks to slots, builds a PROGRAM given as a
// Go package directory, runs the rendezvous server, starts the ranks with
// the launch contract in their environment, forwards their output line by
// line and jiarun's standard input to one rank, passes signals on, stops the
// whole job when a rank fails, and returns the exit code jiarun ends with.
//
// Ranks on other hosts are started by one proxy per host (`jiarun proxy`,
// see RunProxy), reached over SSH or a launch agent, with one framed link
// per proxy. With more other hosts than Job.Fanout, proxies start further
// proxies (a tree; see planTree) and relay their frames, and over SSH the
// login node remains the authority of the proxies' own logins (treeAuth).
//
// Cleanup is a rule, not a best effort: every rank runs in its own process
// group with a parent-death signal, so no rank outlives jiarun, even when
// jiarun itself is killed with SIGKILL.
//
// Exit codes: 0 when every rank exits 0; a failing rank's own code (128 +
// signal number for a rank killed by a signal); 128 + signal number when
// jiarun is interrupted; 124 when --timeout expires; 2 for bad input, in
// which case nothing was started.
package launcher
