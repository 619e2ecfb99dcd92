//go:build verbs

package main

// The verbs provider (cgo, libibverbs) is measured when built in and a
// device exists.
import _ "github.com/jiarun/jia/rdmaio/verbs"
