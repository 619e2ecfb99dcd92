package pmix

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Status is a PMIx status code (pmix_status_t). A Status other than
// Success is an error, so that errors.Is(err, ErrNotFound) tells why a call
// failed.
type Status int32

// The PMIx status codes the client reports by name.
const (
	Success            Status = 0
	ErrGeneric         Status = -1
	ErrExists          Status = -11
	ErrWouldBlock      Status = -15
	ErrUnknownDataType Status = -16
	ErrTypeMismatch    Status = -18
	ErrUnpackFailure   Status = -20
	ErrPackFailure     Status = -21
	ErrNoPermissions   Status = -23
	ErrTimeout         Status = -24
	ErrUnreach         Status = -25
	ErrBadParam        Status = -27
	ErrOutOfResource   Status = -29
	ErrInit            Status = -31
	ErrNoMem           Status = -32
	ErrNotFound        Status = -46
	ErrNotSupported    Status = -47
	ErrCommFailure     Status = -49
	ErrPartialSuccess  Status = -52
	ErrLostConnection  Status = -61
)

var statusNames = map[Status]string{
	Success:            "PMIX_SUCCESS",
	ErrGeneric:         "PMIX_ERROR",
	ErrExists:          "PMIX_ERR_EXISTS",
	ErrWouldBlock:      "PMIX_ERR_WOULD_BLOCK",
	ErrUnknownDataType: "PMIX_ERR_UNKNOWN_DATA_TYPE",
	ErrTypeMismatch:    "PMIX_ERR_TYPE_MISMATCH",
	ErrUnpackFailure:   "PMIX_ERR_UNPACK_FAILURE",
	ErrPackFailure:     "PMIX_ERR_PACK_FAILURE",
	ErrNoPermissions:   "PMIX_ERR_NO_PERMISSIONS",
	ErrTimeout:         "PMIX_ERR_TIMEOUT",
	ErrUnreach:         "PMIX_ERR_UNREACH",
	ErrBadParam:        "PMIX_ERR_BAD_PARAM",
	ErrOutOfResource:   "PMIX_ERR_OUT_OF_RESOURCE",
	ErrInit:            "PMIX_ERR_INIT",
	ErrNoMem:           "PMIX_ERR_NOMEM",
	ErrNotFound:        "PMIX_ERR_NOT_FOUND",
	ErrNotSupported:    "PMIX_ERR_NOT_SUPPORTED",
	ErrCommFailure:     "PMIX_ERR_COMM_FAILURE",
	ErrPartialSuccess:  "PMIX_ERR_PARTIAL_SUCCESS",
	ErrLostConnection:  "PMIX_ERR_LOST_CONNECTION",
}

// String returns the status's PMIx name and number, e.g.
// "PMIX_ERR_NOT_FOUND (-46)", or "PMIx status -123" for a code the client
// does not name.
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n + " (" + strconv.Itoa(int(s)) + ")"
	}
	return "PMIx status " + strconv.Itoa(int(s))
}

// Error returns s.String(): a Status other than Success is an error.
func (s Status) Error() string { return s.String() }

// Error is a failed PMIx call: the operation (call and key) and the status
// the library returned. It unwraps to its Status.
type Error struct {
	Op     string
	Status Status
	// Detail is the library's own description of the status, if any.
	Detail string
}

// Error describes the failed call.
func (e *Error) Error() string {
	s := "pmix: " + e.Op + ": " + e.Status.String()
	if d := strings.TrimSpace(e.Detail); d != "" && !strings.Contains(s, d) {
		s += ": " + d
	}
	return s
}

// Unwrap returns the status, for errors.Is.
func (e *Error) Unwrap() error { return e.Status }

// check maps the status rc of op to an error: nil for Success (and for
// PMIx's "operation succeeded" variant, -157), an *Error otherwise.
// detail, when not nil, describes the status.
func check(op string, rc int, detail func(int) string) error {
	if rc == int(Success) || rc == opSucceeded {
		return nil
	}
	e := &Error{Op: op, Status: Status(rc)}
	if detail != nil {
		e.Detail = detail(rc)
	}
	return e
}

// opSucceeded is PMIX_OPERATION_SUCCEEDED: an operation completed at once.
const opSucceeded = -157

// MaxKeyLen is the longest key PMIx accepts (PMIX_MAX_KEYLEN).
const MaxKeyLen = 511

// errKey is returned for keys PMIx would refuse or misread.
var errKey = errors.New("pmix: bad key")

// CheckKey reports whether key can name a value the program puts: not
// empty, at most MaxKeyLen bytes, without NUL, and not in PMIx's reserved
// "pmix" name space.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", errKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, more than %d", errKey, len(key), MaxKeyLen)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w %q: contains NUL", errKey, key)
	case strings.HasPrefix(key, "pmix"):
		return fmt.Errorf("%w %q: the prefix \"pmix\" is reserved for PMIx's own keys", errKey, key)
	}
	return nil
}
