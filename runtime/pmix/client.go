//go:build pmix && cgo

package pmix

/*
#cgo pkg-config: pmix
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pmix.h>

static pmix_proc_t jia_me;

static int jia_init(void) { return PMIx_Init(&jia_me, NULL, 0); }
static const char *jia_nspace(void) { return jia_me.nspace; }
static uint32_t jia_rank(void) { return jia_me.rank; }

static int jia_get(uint32_t rank, const char *key, pmix_value_t **v) {
	pmix_proc_t p;
	PMIX_LOAD_PROCID(&p, jia_me.nspace, rank);
	*v = NULL;
	return PMIx_Get(&p, key, NULL, 0, v);
}

// jia_get_uint gets an unsigned integer, whatever width the server chose.
static int jia_get_uint(uint32_t rank, const char *key, uint64_t *out) {
	pmix_value_t *v;
	int rc = jia_get(rank, key, &v);
	if (rc != PMIX_SUCCESS) return rc;
	switch (v->type) {
	case PMIX_UINT8: *out = v->data.uint8; break;
	case PMIX_UINT16: *out = v->data.uint16; break;
	case PMIX_UINT32: *out = v->data.uint32; break;
	case PMIX_UINT64: *out = v->data.uint64; break;
	case PMIX_PROC_RANK: *out = v->data.rank; break;
	case PMIX_INT:
		if (v->data.integer < 0) rc = PMIX_ERR_TYPE_MISMATCH;
		else *out = (uint64_t)v->data.integer;
		break;
	default: rc = PMIX_ERR_TYPE_MISMATCH;
	}
	PMIX_VALUE_RELEASE(v);
	return rc;
}

// jia_get_bytes gets a byte object or a string: *data and *n point into *v,
// which the caller releases with jia_release.
static int jia_get_bytes(uint32_t rank, const char *key, pmix_value_t **v, char **data, size_t *n) {
	int rc = jia_get(rank, key, v);
	if (rc != PMIX_SUCCESS) return rc;
	switch ((*v)->type) {
	case PMIX_BYTE_OBJECT: *data = (*v)->data.bo.bytes; *n = (*v)->data.bo.size; return PMIX_SUCCESS;
	case PMIX_STRING: *data = (*v)->data.string; *n = *data ? strlen(*data) : 0; return PMIX_SUCCESS;
	}
	PMIX_VALUE_RELEASE(*v);
	*v = NULL;
	return PMIX_ERR_TYPE_MISMATCH;
}

static void jia_release(pmix_value_t *v) { if (v) PMIX_VALUE_RELEASE(v); }

// jia_put stores a byte object with global scope; PMIx_Put copies it.
static int jia_put(const char *key, char *data, size_t n) {
	pmix_value_t v;
	PMIX_VALUE_CONSTRUCT(&v);
	v.type = PMIX_BYTE_OBJECT;
	v.data.bo.bytes = data;
	v.data.bo.size = n;
	return PMIx_Put(PMIX_GLOBAL, key, &v);
}

// jia_fence is a fence of the whole namespace that collects the data put
// before it.
static int jia_fence(void) {
	pmix_info_t info;
	bool yes = true;
	PMIX_INFO_CONSTRUCT(&info);
	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
	int rc = PMIx_Fence(NULL, 0, &info, 1);
	PMIX_INFO_DESTRUCT(&info);
	return rc;
}

static int jia_abort(int status, const char *msg) { return PMIx_Abort(status, msg, NULL, 0); }
static int jia_finalize(void) { return PMIx_Finalize(NULL, 0); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// The PMIx codes the Go constants name must be the library's: a mismatch
// does not compile.
const (
	_ = uint(ErrNotFound-C.PMIX_ERR_NOT_FOUND) + uint(C.PMIX_ERR_NOT_FOUND-ErrNotFound)
	_ = uint(ErrInit-C.PMIX_ERR_INIT) + uint(C.PMIX_ERR_INIT-ErrInit)
	_ = uint(ErrUnreach-C.PMIX_ERR_UNREACH) + uint(C.PMIX_ERR_UNREACH-ErrUnreach)
	_ = uint(ErrTypeMismatch-C.PMIX_ERR_TYPE_MISMATCH) + uint(C.PMIX_ERR_TYPE_MISMATCH-ErrTypeMismatch)
	_ = uint(ErrLostConnection-C.PMIX_ERR_LOST_CONNECTION) + uint(C.PMIX_ERR_LOST_CONNECTION-ErrLostConnection)
	_ = uint(opSucceeded-C.PMIX_OPERATION_SUCCEEDED) + uint(C.PMIX_OPERATION_SUCCEEDED-opSucceeded)
	_ = uint(MaxKeyLen-C.PMIX_MAX_KEYLEN) + uint(C.PMIX_MAX_KEYLEN-MaxKeyLen)
)

// Client is this process's PMIx session. The library keeps one session per
// process; Init returns it and Finalize ends it.
type Client struct {
	// Namespace is the job's PMIx namespace (Slurm: "slurm.pmix.JOB.STEP").
	Namespace string
	// Rank and Size are this process's rank in its namespace and the
	// number of processes in it (PMIX_JOB_SIZE).
	Rank, Size int
	// LocalRank and LocalSize are this process's index among the job's
	// processes on its node and their number (PMIX_LOCAL_RANK,
	// PMIX_LOCAL_SIZE); LocalSize is 0 when the server does not say.
	LocalRank, LocalSize int
	// Hostname is the name of this process's node (PMIX_HOSTNAME), "" when
	// the server does not say.
	Hostname string

	mu        sync.Mutex
	finalized bool
}

func errorString(rc int) string { return C.GoString(C.PMIx_Error_string(C.pmix_status_t(rc))) }

// Init connects to the PMIx server named in the environment and reads this
// process's rank, the job's size, the process's place on its node and the
// node's name.
func Init() (*Client, error) {
	if err := check("PMIx_Init", int(C.jia_init()), errorString); err != nil {
		return nil, err
	}
	c := &Client{Namespace: C.GoString(C.jia_nspace()), Rank: int(C.jia_rank())}
	size, err := c.getUint(C.PMIX_RANK_WILDCARD, C.PMIX_JOB_SIZE)
	if err != nil {
		C.jia_finalize()
		return nil, err
	}
	c.Size = int(size)
	if c.Rank < 0 || c.Rank >= c.Size {
		C.jia_finalize()
		return nil, fmt.Errorf("pmix: rank %d outside job size %d", c.Rank, c.Size)
	}
	if lr, err := c.getUint(C.jia_rank(), C.PMIX_LOCAL_RANK); err == nil {
		if ls, err := c.getUint(C.PMIX_RANK_WILDCARD, C.PMIX_LOCAL_SIZE); err == nil && lr < ls {
			c.LocalRank, c.LocalSize = int(lr), int(ls)
		}
	}
	if h, err := c.Get(c.Rank, C.PMIX_HOSTNAME); err == nil {
		c.Hostname = string(h)
	}
	return c, nil
}

func (c *Client) getUint(rank C.uint32_t, key string) (uint64, error) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var v C.uint64_t
	if err := check("PMIx_Get("+key+")", int(C.jia_get_uint(rank, ck, &v)), errorString); err != nil {
		return 0, err
	}
	return uint64(v), nil
}

// Put stores value under key for every process of the job, once committed
// and fenced.
func (c *Client) Put(key string, value []byte) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var p *C.char
	if len(value) > 0 {
		p = (*C.char)(unsafe.Pointer(&value[0]))
	}
	return check("PMIx_Put("+key+")", int(C.jia_put(ck, p, C.size_t(len(value)))), errorString)
}

// Commit sends the values put so far to the server.
func (c *Client) Commit() error {
	return check("PMIx_Commit", int(C.PMIx_Commit()), errorString)
}

// Fence waits until every process of the job has reached the fence and
// collects the values they committed before it, so that Get of any of
// them is then answered locally.
func (c *Client) Fence() error {
	return check("PMIx_Fence", int(C.jia_fence()), errorString)
}

// Get returns the value that process rank of the job put under key.
func (c *Client) Get(rank int, key string) ([]byte, error) {
	if rank < 0 {
		return nil, fmt.Errorf("pmix: get %q: rank %d", key, rank)
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var (
		v    *C.pmix_value_t
		data *C.char
		n    C.size_t
	)
	rc := int(C.jia_get_bytes(C.uint32_t(rank), ck, &v, &data, &n))
	if err := check(fmt.Sprintf("PMIx_Get(rank %d, %s)", rank, key), rc, errorString); err != nil {
		return nil, err
	}
	defer C.jia_release(v)
	return C.GoBytes(unsafe.Pointer(data), C.int(n)), nil
}

// Abort asks the server to end every process of the job, reporting status
// and msg.
func (c *Client) Abort(status int, msg string) error {
	cm := C.CString(msg)
	defer C.free(unsafe.Pointer(cm))
	return check("PMIx_Abort", int(C.jia_abort(C.int(status), cm)), errorString)
}

// Finalize ends the session. Calls after the first do nothing.
func (c *Client) Finalize() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finalized {
		return nil
	}
	c.finalized = true
	return check("PMIx_Finalize", int(C.jia_finalize()), errorString)
}
