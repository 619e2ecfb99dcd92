//go:build pmix && cgo

package runtime

import (
	"fmt"

	"github.com/jiarun/jia/runtime/pmix"
)

// pmixKVS is the PMIx key-value space: values travel as PMIx byte objects,
// and a fence first commits what was put.
type pmixKVS struct{ c *pmix.Client }

// dialPMIx opens the PMIx session and fills in the contract from it: rank,
// size, place on the node and the node's name.
func dialPMIx(c *Contract) (pmKVS, error) {
	cl, err := pmix.Init()
	if err != nil {
		return nil, err
	}
	if c.Rank >= 0 && c.Rank != cl.Rank {
		err := fmt.Errorf("pmix: the server says rank %d, PMIX_RANK says %d", cl.Rank, c.Rank)
		cl.Abort(1, err.Error())
		return nil, err
	}
	c.Rank, c.Size = cl.Rank, cl.Size
	c.PMIJob = cl.Namespace
	c.Job = pmixJobName(cl.Namespace)
	if cl.LocalSize > 0 {
		c.LocalRank, c.LocalSize = cl.LocalRank, cl.LocalSize
	}
	if cl.Hostname != "" {
		c.Host = cl.Hostname
	}
	return pmixKVS{cl}, nil
}

func (k pmixKVS) Put(key string, value []byte) error { return k.c.Put(key, value) }

func (k pmixKVS) Fence() error {
	if err := k.c.Commit(); err != nil {
		return err
	}
	return k.c.Fence()
}

func (k pmixKVS) Get(src int, key string) ([]byte, error) { return k.c.Get(src, key) }

func (k pmixKVS) Abort(status int, msg string) error { return k.c.Abort(status, msg) }

func (k pmixKVS) Finalize() error { return k.c.Finalize() }
