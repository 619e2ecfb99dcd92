//go:build !pmix || !cgo

package pmix

// Available reports whether this build has the PMIx client (built with
// CGO_ENABLED=1 and the build tag pmix).
const Available = false
