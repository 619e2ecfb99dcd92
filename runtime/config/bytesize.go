package config

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes. In a file or a variable it is written as an
// integer number of bytes or as a number with a unit: "64KiB", "4MiB", "1G",
// "1.5 GiB". Units are case-insensitive and all are powers of 1024, as in
// Slurm and UCX: K, KB and KiB are 1024 bytes; M, MB, MiB 1024²; G, GB, GiB
// 1024³; T, TB, TiB 1024⁴; B is one byte. A fraction is allowed when the
// result is a whole number of bytes.
type ByteSize int64

// Byte size units.
const (
	KiB ByteSize = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

var byteUnits = map[string]ByteSize{
	"": 1, "b": 1,
	"k": KiB, "kb": KiB, "kib": KiB,
	"m": MiB, "mb": MiB, "mib": MiB,
	"g": GiB, "gb": GiB, "gib": GiB,
	"t": TiB, "tb": TiB, "tib": TiB,
}

// ParseByteSize parses a size such as "65536", "64KiB", "4 MiB", "1G" or
// "1.5GiB". A negative size parses; [Config.Validate] rejects it where sizes
// must not be negative.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	if i < len(t) && (t[i] == '+' || t[i] == '-') {
		i++
	}
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '_') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := byteUnits[unit]
	num = strings.ReplaceAll(num, "_", "")
	if !ok || num == "" || num == "+" || num == "-" {
		return 0, fmt.Errorf("invalid byte size %q (want bytes or a number with a unit: \"64KiB\", \"4MiB\", \"1G\")", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid byte size %q (want bytes or a number with a unit: \"64KiB\", \"4MiB\", \"1G\")", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(int64(mult)))
	if !r.IsInt() {
		return 0, fmt.Errorf("byte size %q is not a whole number of bytes", s)
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("byte size %q is too large (at most %d bytes)", s, int64(math.MaxInt64))
	}
	return ByteSize(n.Int64()), nil
}

// String returns the size with the largest binary unit that divides it
// exactly ("64KiB", "4GiB"), or as plain bytes ("1000"). ParseByteSize
// reads it back exactly.
func (b ByteSize) String() string {
	if b == 0 {
		return "0"
	}
	for _, u := range []struct {
		size ByteSize
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalText implements [encoding.TextMarshaler] with [ByteSize.String].
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements [encoding.TextUnmarshaler] with [ParseByteSize].
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Set parses s into b, so that *ByteSize is a flag.Value (and a
// urfave/cli Generic).
func (b *ByteSize) Set(s string) error { return b.UnmarshalText([]byte(s)) }
