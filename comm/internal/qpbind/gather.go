package qpbind

// MsgLen returns the length of the message hdr followed by the pieces of
// data.
func MsgLen(hdr []byte, data [][]byte) int {
	n := len(hdr)
	for _, b := range data {
		n += len(b)
	}
	return n
}

// Gather copies hdr and then the pieces of data into dst, which must hold
// them all, and returns the number of bytes copied.
func Gather(dst, hdr []byte, data [][]byte) int {
	n := copy(dst, hdr)
	for _, b := range data {
		n += copy(dst[n:], b)
	}
	return n
}
