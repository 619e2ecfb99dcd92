//go:build verbs

package launcher

import "github.com/jiarun/jia/rdmaio/verbs"

func init() {
	verbsBuilt = true
	verbsProbe = func() Availability {
		desc, err := verbs.Probe()
		if err != nil {
			return Availability{Detail: err.Error()}
		}
		return Availability{OK: true, Detail: "rdmaio verbs provider, RDMA devices " + desc}
	}
}
