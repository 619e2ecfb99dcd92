//go:build !amd64 || purego

package comm

// fastKernels keeps the portable kernels.
func fastKernels() {}
