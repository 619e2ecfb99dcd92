package provider

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jiarun/jia/rdmaio"
)

// KeyBits is the number of low key bits that hold a tag; the rest hold the
// slot index plus one, so key 0 is never valid. Like verbs' 8-bit key part,
// the tag changes each time a slot is reused, so a stale key is caught until
// the tag wraps.
const KeyBits = 8

// MaxKeySlots is the largest number of slots a KeyTable can have.
const MaxKeySlots = 1<<(32-KeyBits) - 1

// KeyIndex returns the slot index a key names, or -1 for key 0.
func KeyIndex(key uint32) int { return int(key>>KeyBits) - 1 }

// KeyTable maps 32-bit keys (memory region keys, or other handles) to
// values. Lookup is lock-free and allocation-free; Insert and Remove take a
// lock.
type KeyTable[T any] struct {
	slots []atomic.Pointer[T]
	keys  []atomic.Uint32

	mu   sync.Mutex
	free []int32
	tags []uint8
}

// NewKeyTable returns a table with n slots.
func NewKeyTable[T any](n int) (*KeyTable[T], error) {
	if n <= 0 || n > MaxKeySlots {
		return nil, fmt.Errorf("%w: key table of %d slots (want 1..%d)", rdmaio.ErrInvalidArgument, n, MaxKeySlots)
	}
	t := &KeyTable[T]{
		slots: make([]atomic.Pointer[T], n),
		keys:  make([]atomic.Uint32, n),
		free:  make([]int32, n),
		tags:  make([]uint8, n),
	}
	for i := range t.free {
		t.free[i] = int32(n - 1 - i) // pop from the end: lowest index first
	}
	return t, nil
}

// Len returns the number of slots.
func (t *KeyTable[T]) Len() int { return len(t.slots) }

// Insert stores v and returns its key.
func (t *KeyTable[T]) Insert(v *T) (uint32, error) {
	if v == nil {
		return 0, fmt.Errorf("%w: insert nil", rdmaio.ErrInvalidArgument)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) == 0 {
		return 0, fmt.Errorf("%w: all %d keys in use", rdmaio.ErrInvalidArgument, len(t.slots))
	}
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.tags[i]++
	key := uint32(i+1)<<KeyBits | uint32(t.tags[i])
	t.slots[i].Store(v)
	t.keys[i].Store(key)
	return key, nil
}

// Lookup returns the value of key, or nil when the key is not (or no longer)
// valid.
func (t *KeyTable[T]) Lookup(key uint32) *T {
	i := KeyIndex(key)
	if i < 0 || i >= len(t.slots) {
		return nil
	}
	v := t.slots[i].Load()
	if t.keys[i].Load() != key {
		return nil
	}
	return v
}

// Remove invalidates key and returns its value, or nil when it was not
// valid.
func (t *KeyTable[T]) Remove(key uint32) *T {
	i := KeyIndex(key)
	if i < 0 || i >= len(t.slots) {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys[i].Load() != key {
		return nil
	}
	t.keys[i].Store(0)
	v := t.slots[i].Swap(nil)
	t.free = append(t.free, int32(i))
	return v
}

// Range calls f for every valid entry until f returns false.
func (t *KeyTable[T]) Range(f func(key uint32, v *T) bool) {
	for i := range t.slots {
		k := t.keys[i].Load()
		v := t.slots[i].Load()
		if k != 0 && v != nil && !f(k, v) {
			return
		}
	}
}
