package npb

// Internals for the external tests (package npb_test).

// EPCounts runs EP and also returns the Gaussian pair count and the annulus
// counts, which NPB computes but does not verify.
func EPCounts(c Comm, class byte) (Result, float64, [10]float64, error) {
	r, cnt, err := runEP(c, class)
	return r, cnt.gc, cnt.q, err
}
