package qtransport

// gatherInto copies hdr and then the pieces of data into dst, which must
// hold them all, and returns the number of bytes copied.
func gatherInto(dst, hdr []byte, data [][]byte) int {
	n := copy(dst, hdr)
	for _, b := range data {
		n += copy(dst[n:], b)
	}
	return n
}

// scatterFrom copies src into the pieces of dst, in order.
func scatterFrom(dst [][]byte, src []byte) {
	for _, b := range dst {
		if len(src) == 0 {
			return
		}
		src = src[copy(b, src):]
	}
}
