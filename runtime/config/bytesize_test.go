package config_test

import (
	"strings"
	"testing"

	"github.com/jiarun/jia/runtime/config"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want config.ByteSize
	}{
		{"0", 0},
		{"65536", 65536},
		{"1_000", 1000},
		{"64KiB", 64 << 10},
		{"64kib", 64 << 10},
		{"64K", 64 << 10},
		{"64KB", 64 << 10},
		{"64 KiB", 64 << 10},
		{" 4MiB ", 4 << 20},
		{"4m", 4 << 20},
		{"1G", 1 << 30},
		{"1.5GiB", 3 << 29},
		{"0.5k", 512},
		{".5K", 512},
		{"2TiB", 2 << 40},
		{"12B", 12},
		{"+3k", 3 << 10},
		{"-1K", -1024},
	}
	for _, tt := range tests {
		got, err := config.ParseByteSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseByteSizeErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `invalid byte size "" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"KiB", `invalid byte size "KiB" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"64 kilobytes", `invalid byte size "64 kilobytes" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"1.2.3M", `invalid byte size "1.2.3M" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"-", `invalid byte size "-" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"1e3", `invalid byte size "1e3" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"1.3B", `byte size "1.3B" is not a whole number of bytes`},
		{"0.1K", `byte size "0.1K" is not a whole number of bytes`},
		{"8388608TiB", `byte size "8388608TiB" is too large (at most 9223372036854775807 bytes)`},
		{"9223372036854775808", `byte size "9223372036854775808" is too large (at most 9223372036854775807 bytes)`},
	}
	for _, tt := range tests {
		_, err := config.ParseByteSize(tt.in)
		if err == nil || err.Error() != tt.want {
			t.Errorf("ParseByteSize(%q) error = %v, want %q", tt.in, err, tt.want)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   config.ByteSize
		want string
	}{
		{0, "0"}, {1, "1"}, {1000, "1000"}, {1024, "1KiB"}, {1536, "1536"}, {64 << 10, "64KiB"},
		{3 << 19, "1536KiB"}, {4 << 20, "4MiB"}, {1 << 30, "1GiB"}, {1<<30 + 1, "1073741825"},
		{5 << 40, "5TiB"}, {-2048, "-2KiB"}, {1 << 62, "4194304TiB"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
		back, err := config.ParseByteSize(tt.want)
		if err != nil || back != tt.in {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tt.want, back, err, int64(tt.in))
		}
	}
}

func TestByteSizeText(t *testing.T) {
	var b config.ByteSize
	if err := b.UnmarshalText([]byte("8MiB")); err != nil || b != 8*config.MiB {
		t.Errorf("UnmarshalText(8MiB) = %v, %v", b, err)
	}
	if text, err := b.MarshalText(); err != nil || string(text) != "8MiB" {
		t.Errorf("MarshalText = %q, %v", text, err)
	}
	if err := b.Set("2k"); err != nil || b != 2*config.KiB {
		t.Errorf("Set(2k) = %v, %v", b, err)
	}
	if err := b.Set("lots"); err == nil || !strings.Contains(err.Error(), `"lots"`) {
		t.Errorf("Set(lots) = %v, want an error naming the value", err)
	}
	if b != 2*config.KiB {
		t.Errorf("failed Set changed the value to %v", b)
	}
}
