package npb

// IterationStep builds kernel's state for class on c, runs its untimed
// warm-up, and returns one step of its timed loop: IS one ranking, CG one
// inverse power step, MG one V-cycle with its residual, FT one evolve,
// inverse FFT and checksum. Every rank must call the step equally often.
// EP has no step (its timed loop is one pass over its batches).
func IterationStep(kernel string, c Comm, class byte) (func() error, error) {
	switch kernel {
	case "IS":
		s := newISState(c, class)
		it := 0
		return func() error { it = it%isMaxIterations + 1; return s.rank(it) }, nil
	case "CG":
		s := newCGState(c, class)
		for i := range s.x {
			s.x[i] = 1
		}
		return func() error { _, err := s.iterate(); return err }, nil
	case "MG":
		s := newMGState(c, class)
		clear(s.u)
		if err := s.zran3(); err != nil {
			return nil, err
		}
		if err := s.resid(s.u, s.v, s.r, s.lt); err != nil {
			return nil, err
		}
		return func() error {
			if err := s.mg3P(); err != nil {
				return err
			}
			return s.resid(s.u, s.v, s.r, s.lt)
		}, nil
	case "FT":
		s := newFTState(c, class)
		s.setup()
		if err := s.forward(); err != nil {
			return nil, err
		}
		return func() error {
			if err := s.evolveInverse(); err != nil {
				return err
			}
			_, err := s.checksum()
			return err
		}, nil
	}
	return nil, nil
}
