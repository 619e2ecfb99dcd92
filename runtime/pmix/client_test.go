//go:build pmix && cgo

package pmix

import (
	"errors"
	"os"
	"testing"
)

// Without a server in the environment, Init fails with the library's
// status mapped to a Go error, and does not pretend to be a singleton.
func TestInitWithoutServerIsUnreach(t *testing.T) {
	for _, name := range ServerEnv {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	c, err := Init()
	if err == nil {
		c.Finalize()
		t.Fatal("Init succeeded without a PMIx server")
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Op != "PMIx_Init" || !errors.Is(err, ErrUnreach) {
		t.Fatalf("Init: %v (%#v), want PMIx_Init: PMIX_ERR_UNREACH", err, err)
	}
}

func TestAvailable(t *testing.T) {
	if !Available {
		t.Fatal("a build with cgo and the tag pmix says the client is not available")
	}
}
