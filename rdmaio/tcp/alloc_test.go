package tcp_test

import (
	"testing"

	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestZeroAllocs: posting and polling allocate nothing, for every operation,
// small and large, on both ends.
func TestZeroAllocs(t *testing.T) { rdmaiotest.Allocs(t, &fabric{}) }
