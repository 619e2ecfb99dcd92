package npb

// ISRankOnce builds IS's state for class on c, runs ranking it and returns
// this rank's generated keys, the keys it ranked and its key range.
func ISRankOnce(c Comm, class byte, it int) (keys, ranked []int32, minKey, maxKey int32, err error) {
	s := newISState(c, class)
	if err := s.rank(it); err != nil {
		return nil, nil, 0, 0, err
	}
	return s.keys, s.buff2[:s.nRanked], s.minKey, s.maxKeyV, nil
}
