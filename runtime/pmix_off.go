//go:build !pmix || !cgo

package runtime

import "errors"

// dialPMIx is never reached in a build without the PMIx client: the
// contract of a rank started under PMIx is already an error (pmixContract).
func dialPMIx(*Contract) (pmKVS, error) {
	return nil, errors.New("pmix: this program was built without PMIx support")
}
