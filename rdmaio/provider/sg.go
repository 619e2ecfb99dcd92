package provider

// The scatter/gather helpers work on lists of resolved buffers: a provider
// resolves each SGE (key, address, length) to a []byte once, after the
// checks, and moves data with these.

// Gather copies the concatenation of src into dst and returns the number of
// bytes copied, min(len(dst), total length of src).
func Gather(dst []byte, src [][]byte) int {
	n := 0
	for _, s := range src {
		if n == len(dst) {
			break
		}
		n += copy(dst[n:], s)
	}
	return n
}

// Scatter copies src across the buffers of dst in order and returns the
// number of bytes copied, min(len(src), total capacity of dst).
func Scatter(dst [][]byte, src []byte) int {
	n := 0
	for _, d := range dst {
		if n == len(src) {
			break
		}
		n += copy(d, src[n:])
	}
	return n
}

// CopySG copies the concatenation of src into the concatenation of dst and
// returns the number of bytes copied.
func CopySG(dst, src [][]byte) int {
	n := 0
	di, doff := 0, 0
	for _, s := range src {
		for len(s) > 0 {
			for di < len(dst) && doff == len(dst[di]) {
				di, doff = di+1, 0
			}
			if di == len(dst) {
				return n
			}
			c := copy(dst[di][doff:], s)
			doff += c
			n += c
			s = s[c:]
		}
	}
	return n
}

// Total returns the total length of a buffer list.
func Total(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}
