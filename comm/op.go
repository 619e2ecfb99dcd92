package comm

import (
	"fmt"
	"reflect"
)

// Op is a reduction operation. The predefined ones are Sum, Prod, Min,
// Max, LAnd, LOr, LXor, BAnd, BOr, BXor, MinLoc and MaxLoc; NewOp makes a
// user-defined one.
//
// Reductions combine the ranks' contributions in a fixed order that
// depends only on the operation, the algorithm and the number of ranks, so
// a reduction gives bit-identical results on every rank and in every run
// with the same number of ranks. Non-commutative operations are combined in
// rank order (rank 0 first), as MPI requires.
type Op struct {
	code    opCode
	name    string
	commute bool
	fn      func(in, inout []byte)
	typ     reflect.Type
}

type opCode uint8

const (
	opUser opCode = iota
	opSum
	opProd
	opMin
	opMax
	opLAnd
	opLOr
	opLXor
	opBAnd
	opBOr
	opBXor
	opMinLoc
	opMaxLoc
	numOps
)

// The predefined reductions (MPI-4.0 §6.9.2). Sum and Prod apply to every
// Number type; Min and Max to the Real ones; the logical (LAnd, LOr, LXor:
// non-zero is true, the result is 0 or 1) and bitwise ones to the integer
// types; MinLoc and MaxLoc to Loc pairs (the least or greatest value, and
// the least index among equal values).
var (
	Sum    = Op{code: opSum, name: "Sum", commute: true}
	Prod   = Op{code: opProd, name: "Prod", commute: true}
	Min    = Op{code: opMin, name: "Min", commute: true}
	Max    = Op{code: opMax, name: "Max", commute: true}
	LAnd   = Op{code: opLAnd, name: "LAnd", commute: true}
	LOr    = Op{code: opLOr, name: "LOr", commute: true}
	LXor   = Op{code: opLXor, name: "LXor", commute: true}
	BAnd   = Op{code: opBAnd, name: "BAnd", commute: true}
	BOr    = Op{code: opBOr, name: "BOr", commute: true}
	BXor   = Op{code: opBXor, name: "BXor", commute: true}
	MinLoc = Op{code: opMinLoc, name: "MinLoc", commute: true}
	MaxLoc = Op{code: opMaxLoc, name: "MaxLoc", commute: true}
)

// NewOp returns a user-defined reduction on T (MPI_Op_create). fn must
// combine element-wise inout[i] = in[i] ⊕ inout[i], where in holds the
// contribution of lower ranks; it must be associative. If commutative is
// false, contributions are combined in rank order.
func NewOp[T Elem](name string, commutative bool, fn func(in, inout []T)) Op {
	return Op{code: opUser, name: name, commute: commutative, typ: reflect.TypeFor[T](),
		fn: func(in, inout []byte) { fn(fromBytes[T](in), fromBytes[T](inout)) }}
}

// Name returns the operation's name.
func (o Op) Name() string { return o.name }

// Commutative reports whether the operation is commutative.
func (o Op) Commutative() bool { return o.commute }

// String returns the operation's name.
func (o Op) String() string { return o.name }

// reducer is an operation bound to an element type.
type reducer struct {
	fn      func(in, inout []byte)
	elem    int
	commute bool
}

// reducerFor binds op to T.
func reducerFor[T Elem](op Op) (reducer, error) {
	r := reducer{elem: elemSize[T](), commute: op.commute}
	if op.code == opUser {
		if op.fn == nil {
			return r, fmt.Errorf("%w: zero Op", ErrOp)
		}
		if t := reflect.TypeFor[T](); op.typ != t {
			return r, fmt.Errorf("%w: %s is defined on %v, not %v", ErrOp, op.name, op.typ, t)
		}
		r.fn = op.fn
		return r, nil
	}
	k := kindOf[T]()
	if op.code < numOps {
		r.fn = predef[op.code][k]
	}
	if r.fn == nil {
		return r, fmt.Errorf("%w: %s is not defined on %v", ErrOp, op.name, reflect.TypeFor[T]())
	}
	return r, nil
}

type kind uint8

const (
	kNone kind = iota
	kInt8
	kInt16
	kInt32
	kInt64
	kUint8
	kUint16
	kUint32
	kUint64
	kFloat32
	kFloat64
	kComplex64
	kComplex128
	kLocF64
	kLocF32
	kLocInt
	kLocI64
	kLocI32
	numKinds
)

var (
	tLocF64 = reflect.TypeFor[Loc[float64]]()
	tLocF32 = reflect.TypeFor[Loc[float32]]()
	tLocInt = reflect.TypeFor[Loc[int]]()
	tLocI64 = reflect.TypeFor[Loc[int64]]()
	tLocI32 = reflect.TypeFor[Loc[int32]]()
)

func kindOf[T any]() kind {
	t := reflect.TypeFor[T]()
	switch t.Kind() {
	case reflect.Int8:
		return kInt8
	case reflect.Int16:
		return kInt16
	case reflect.Int32:
		return kInt32
	case reflect.Int64:
		return kInt64
	case reflect.Int:
		if t.Size() == 8 {
			return kInt64
		}
		return kInt32
	case reflect.Uint8:
		return kUint8
	case reflect.Uint16:
		return kUint16
	case reflect.Uint32:
		return kUint32
	case reflect.Uint64:
		return kUint64
	case reflect.Uint, reflect.Uintptr:
		if t.Size() == 8 {
			return kUint64
		}
		return kUint32
	case reflect.Float32:
		return kFloat32
	case reflect.Float64:
		return kFloat64
	case reflect.Complex64:
		return kComplex64
	case reflect.Complex128:
		return kComplex128
	}
	switch t {
	case tLocF64:
		return kLocF64
	case tLocF32:
		return kLocF32
	case tLocInt:
		return kLocInt
	case tLocI64:
		return kLocI64
	case tLocI32:
		return kLocI32
	}
	return kNone
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type ordered interface {
	integer | ~float32 | ~float64
}

type arith interface {
	ordered | ~complex64 | ~complex128
}

func opSumT[T arith](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = a[i] + b[i]
	}
}

func opProdT[T arith](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = a[i] * b[i]
	}
}

func opMinT[T ordered](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		if a[i] < b[i] {
			b[i] = a[i]
		}
	}
}

func opMaxT[T ordered](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		if a[i] > b[i] {
			b[i] = a[i]
		}
	}
}

func b2i[T integer](v bool) T {
	if v {
		return 1
	}
	return 0
}

func opLAndT[T integer](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = b2i[T](a[i] != 0 && b[i] != 0)
	}
}

func opLOrT[T integer](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = b2i[T](a[i] != 0 || b[i] != 0)
	}
}

func opLXorT[T integer](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = b2i[T]((a[i] != 0) != (b[i] != 0))
	}
}

func opBAndT[T integer](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = a[i] & b[i]
	}
}

func opBOrT[T integer](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = a[i] | b[i]
	}
}

func opBXorT[T integer](in, inout []byte) {
	a, b := fromBytes[T](in), fromBytes[T](inout)
	b = b[:len(a)]
	for i := range a {
		b[i] = a[i] ^ b[i]
	}
}

func opMinLocT[V Real](in, inout []byte) {
	a, b := fromBytes[Loc[V]](in), fromBytes[Loc[V]](inout)
	b = b[:len(a)]
	for i := range a {
		if a[i].Val < b[i].Val || (a[i].Val == b[i].Val && a[i].Idx < b[i].Idx) {
			b[i] = a[i]
		}
	}
}

func opMaxLocT[V Real](in, inout []byte) {
	a, b := fromBytes[Loc[V]](in), fromBytes[Loc[V]](inout)
	b = b[:len(a)]
	for i := range a {
		if a[i].Val > b[i].Val || (a[i].Val == b[i].Val && a[i].Idx < b[i].Idx) {
			b[i] = a[i]
		}
	}
}

// predef[op][kind] is the byte-level function of a predefined reduction.
var predef [numOps][numKinds]func(in, inout []byte)

func setInts(op opCode, f8, f16, f32, f64, u8, u16, u32, u64 func(in, inout []byte)) {
	predef[op][kInt8], predef[op][kInt16], predef[op][kInt32], predef[op][kInt64] = f8, f16, f32, f64
	predef[op][kUint8], predef[op][kUint16], predef[op][kUint32], predef[op][kUint64] = u8, u16, u32, u64
}

func init() {
	setInts(opSum, opSumT[int8], opSumT[int16], opSumT[int32], opSumT[int64], opSumT[uint8], opSumT[uint16], opSumT[uint32], opSumT[uint64])
	predef[opSum][kFloat32], predef[opSum][kFloat64] = opSumT[float32], opSumT[float64]
	predef[opSum][kComplex64], predef[opSum][kComplex128] = opSumT[complex64], opSumT[complex128]

	setInts(opProd, opProdT[int8], opProdT[int16], opProdT[int32], opProdT[int64], opProdT[uint8], opProdT[uint16], opProdT[uint32], opProdT[uint64])
	predef[opProd][kFloat32], predef[opProd][kFloat64] = opProdT[float32], opProdT[float64]
	predef[opProd][kComplex64], predef[opProd][kComplex128] = opProdT[complex64], opProdT[complex128]

	setInts(opMin, opMinT[int8], opMinT[int16], opMinT[int32], opMinT[int64], opMinT[uint8], opMinT[uint16], opMinT[uint32], opMinT[uint64])
	predef[opMin][kFloat32], predef[opMin][kFloat64] = opMinT[float32], opMinT[float64]
	setInts(opMax, opMaxT[int8], opMaxT[int16], opMaxT[int32], opMaxT[int64], opMaxT[uint8], opMaxT[uint16], opMaxT[uint32], opMaxT[uint64])
	predef[opMax][kFloat32], predef[opMax][kFloat64] = opMaxT[float32], opMaxT[float64]

	setInts(opLAnd, opLAndT[int8], opLAndT[int16], opLAndT[int32], opLAndT[int64], opLAndT[uint8], opLAndT[uint16], opLAndT[uint32], opLAndT[uint64])
	setInts(opLOr, opLOrT[int8], opLOrT[int16], opLOrT[int32], opLOrT[int64], opLOrT[uint8], opLOrT[uint16], opLOrT[uint32], opLOrT[uint64])
	setInts(opLXor, opLXorT[int8], opLXorT[int16], opLXorT[int32], opLXorT[int64], opLXorT[uint8], opLXorT[uint16], opLXorT[uint32], opLXorT[uint64])
	setInts(opBAnd, opBAndT[int8], opBAndT[int16], opBAndT[int32], opBAndT[int64], opBAndT[uint8], opBAndT[uint16], opBAndT[uint32], opBAndT[uint64])
	setInts(opBOr, opBOrT[int8], opBOrT[int16], opBOrT[int32], opBOrT[int64], opBOrT[uint8], opBOrT[uint16], opBOrT[uint32], opBOrT[uint64])
	setInts(opBXor, opBXorT[int8], opBXorT[int16], opBXorT[int32], opBXorT[int64], opBXorT[uint8], opBXorT[uint16], opBXorT[uint32], opBXorT[uint64])

	predef[opMinLoc][kLocF64], predef[opMaxLoc][kLocF64] = opMinLocT[float64], opMaxLocT[float64]
	predef[opMinLoc][kLocF32], predef[opMaxLoc][kLocF32] = opMinLocT[float32], opMaxLocT[float32]
	predef[opMinLoc][kLocInt], predef[opMaxLoc][kLocInt] = opMinLocT[int], opMaxLocT[int]
	predef[opMinLoc][kLocI64], predef[opMaxLoc][kLocI64] = opMinLocT[int64], opMaxLocT[int64]
	predef[opMinLoc][kLocI32], predef[opMaxLoc][kLocI32] = opMinLocT[int32], opMaxLocT[int32]
	fastKernels()
}
