//go:build verbs

package runtime

import _ "github.com/jiarun/jia/rdmaio/verbs" // the verbs provider, between hosts with RDMA devices
