package pmix

import (
	"errors"
	"strings"
	"testing"
)

func TestStatusNamesAndNumbers(t *testing.T) {
	for s, want := range map[Status]string{
		ErrNotFound:   "PMIX_ERR_NOT_FOUND (-46)",
		ErrUnreach:    "PMIX_ERR_UNREACH (-25)",
		Success:       "PMIX_SUCCESS (0)",
		Status(-9999): "PMIx status -9999",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", int(s), got, want)
		}
		if s.Error() != s.String() {
			t.Errorf("Status(%d): Error and String differ", int(s))
		}
	}
}

func TestCheckMapsStatusToError(t *testing.T) {
	if err := check("PMIx_Put(k)", 0, nil); err != nil {
		t.Errorf("PMIX_SUCCESS: %v", err)
	}
	if err := check("PMIx_Fence", opSucceeded, nil); err != nil {
		t.Errorf("PMIX_OPERATION_SUCCEEDED: %v", err)
	}
	err := check("PMIx_Get(jia-card-3)", -46, func(int) string { return "NOT-FOUND" })
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnreach) {
		t.Fatalf("errors.Is does not tell the status: %v", err)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Op != "PMIx_Get(jia-card-3)" || pe.Status != ErrNotFound {
		t.Fatalf("errors.As: %#v", err)
	}
	for _, want := range []string{"pmix: ", "PMIx_Get(jia-card-3)", "PMIX_ERR_NOT_FOUND (-46)", "NOT-FOUND"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not contain %q", err, want)
		}
	}
	// The library's description is not repeated when the name says it.
	err = check("PMIx_Init", -25, func(int) string { return "PMIX_ERR_UNREACH" })
	if strings.Count(err.Error(), "PMIX_ERR_UNREACH") != 1 {
		t.Errorf("description repeated: %q", err)
	}
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"jia-card-0", "x/exchange/12", strings.Repeat("k", MaxKeyLen)} {
		if err := CheckKey(k); err != nil {
			t.Errorf("CheckKey(%.20q): %v", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", MaxKeyLen+1), "a\x00b", "pmix.job.size", "pmixfoo"} {
		if err := CheckKey(k); err == nil || !errors.Is(err, errKey) {
			t.Errorf("CheckKey(%.20q) = %v, want a bad-key error", k, err)
		}
	}
}

func TestStartedByAnyServerVariable(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	if Started(env(nil)) {
		t.Error("empty environment: started under PMIx")
	}
	if Started(env(map[string]string{"PMI_FD": "3", "SLURM_MPI_TYPE": "pmix", "PMIX_FOO": "x"})) {
		t.Error("no server variable: started under PMIx")
	}
	for _, name := range ServerEnv {
		if !Started(env(map[string]string{name: "x"})) {
			t.Errorf("%s set: not started under PMIx", name)
		}
	}
}
