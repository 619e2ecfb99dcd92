package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The schema is derived from Config's struct tags: each field of Config is
// a section (a TOML table), each field of a section a key. Nothing else in
// the package lists the keys, so a new field is known to the file parser,
// the environment and the encoder at once.

type section struct {
	name   string // TOML table name
	index  int    // field index in Config
	fields []*leaf
}

type leaf struct {
	section string
	key     string // TOML key within the section
	path    string // "section.key"
	index   []int  // field index path from Config
	env     string // JIA_SECTION_KEY
	aliases []string
	typ     reflect.Type
	check   string // value of the check tag: "" or "positive"
	max     int64  // from the max tag (a byte size): the largest value allowed; 0: none
}

var (
	byteSizeType = reflect.TypeFor[ByteSize]()
	durationType = reflect.TypeFor[time.Duration]()
)

// enum is implemented by the string types with a fixed set of values.
type enum interface{ values() []string }

var schema = sync.OnceValue(func() []*section {
	var secs []*section
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		sf := ct.Field(i)
		name := tagName(sf)
		if sf.Type.Kind() != reflect.Struct {
			panic("config: Config." + sf.Name + " is not a section struct")
		}
		sec := &section{name: name, index: i}
		for j := range sf.Type.NumField() {
			ff := sf.Type.Field(j)
			key := tagName(ff)
			l := &leaf{
				section: name,
				key:     key,
				path:    name + "." + key,
				index:   []int{i, j},
				env:     "JIA_" + strings.ToUpper(name) + "_" + strings.ToUpper(key),
				typ:     ff.Type,
				check:   ff.Tag.Get("check"),
			}
			if a := ff.Tag.Get("env"); a != "" {
				l.aliases = strings.Split(a, ",")
			}
			if m := ff.Tag.Get("max"); m != "" {
				b, err := ParseByteSize(m)
				if err != nil || b <= 0 {
					panic("config: bad max tag " + m + " of " + l.path)
				}
				l.max = int64(b)
			}
			if kindOf(l.typ) == "" {
				panic("config: unsupported type " + l.typ.String() + " of " + l.path)
			}
			sec.fields = append(sec.fields, l)
		}
		secs = append(secs, sec)
	}
	return secs
})

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if name == "" {
		panic("config: field " + f.Name + " has no toml tag")
	}
	return name
}

// kindOf classifies the leaf types the schema supports.
func kindOf(t reflect.Type) string {
	switch {
	case t == byteSizeType:
		return "bytesize"
	case t == durationType:
		return "duration"
	case t.Implements(reflect.TypeFor[enum]()):
		return "enum"
	case t.Kind() == reflect.Bool:
		return "bool"
	case t.Kind() == reflect.Int:
		return "int"
	}
	return ""
}

func findSection(name string) *section {
	for _, s := range schema() {
		if s.name == name {
			return s
		}
	}
	return nil
}

func findLeaf(path string) *leaf {
	for _, s := range schema() {
		for _, l := range s.fields {
			if l.path == path {
				return l
			}
		}
	}
	return nil
}

func (l *leaf) field(c *Config) reflect.Value { return reflect.ValueOf(c).Elem().FieldByIndex(l.index) }

// what describes the values the leaf accepts, for error messages.
func (l *leaf) what() string {
	switch kindOf(l.typ) {
	case "bool":
		return "true or false"
	case "int":
		return "an integer"
	case "bytesize":
		return `a size in bytes: an integer or a string such as "64KiB", "4MiB", "1G"`
	case "duration":
		return `a duration: a string such as "200ms", "1.5s", "2m", or a number of seconds`
	case "enum":
		return "one of " + quoteList(reflect.Zero(l.typ).Interface().(enum).values())
	}
	return l.typ.String()
}

func quoteList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// describe writes a decoded TOML value for an error message.
func describe(v any) string { return DescribeTOML(v) }

// DescribeTOML names a value decoded from TOML with its TOML type, for
// error messages: `string "x"`, `integer 3`, `a table`, ….
func DescribeTOML(v any) string {
	switch v := v.(type) {
	case string:
		return "string " + strconv.Quote(v)
	case int64:
		return "integer " + strconv.FormatInt(v, 10)
	case float64:
		return "float " + strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return "boolean " + strconv.FormatBool(v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// setTOML stores v, a value decoded by the TOML library, into the leaf's
// field. It checks the type only; values are checked by problems. Errors do
// not name the key.
func (l *leaf) setTOML(c *Config, v any) error {
	f := l.field(c)
	bad := func() error { return fmt.Errorf("expected %s, found %s", l.what(), describe(v)) }
	switch kindOf(l.typ) {
	case "bool":
		b, ok := v.(bool)
		if !ok {
			return bad()
		}
		f.SetBool(b)
	case "int":
		n, ok := v.(int64)
		if !ok || n != int64(int(n)) {
			return bad()
		}
		f.SetInt(n)
	case "bytesize":
		switch v := v.(type) {
		case int64:
			f.SetInt(v)
		case string:
			b, err := ParseByteSize(v)
			if err != nil {
				return err
			}
			f.SetInt(int64(b))
		default:
			return bad()
		}
	case "duration":
		switch v := v.(type) {
		case int64:
			if v > math.MaxInt64/int64(time.Second) || v < math.MinInt64/int64(time.Second) {
				return fmt.Errorf("duration of %d seconds is out of range", v)
			}
			f.SetInt(int64(time.Duration(v) * time.Second))
		case float64:
			d, err := seconds(v)
			if err != nil {
				return err
			}
			f.SetInt(int64(d))
		case string:
			d, err := parseDuration(v)
			if err != nil {
				return err
			}
			f.SetInt(int64(d))
		default:
			return bad()
		}
	case "enum":
		s, ok := v.(string)
		if !ok {
			return bad()
		}
		f.SetString(strings.ToLower(s))
	}
	return nil
}

// setString stores s, written in an environment variable or a flag, into
// the leaf's field. It checks the syntax only; values are checked by
// problems.
func (l *leaf) setString(c *Config, s string) error {
	f := l.field(c)
	s = strings.TrimSpace(s)
	switch kindOf(l.typ) {
	case "bool":
		switch strings.ToLower(s) {
		case "1", "t", "true", "yes", "on":
			f.SetBool(true)
		case "0", "f", "false", "no", "off":
			f.SetBool(false)
		default:
			return fmt.Errorf("invalid boolean %q (use true or false)", s)
		}
	case "int":
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("invalid integer %q", s)
		}
		f.SetInt(int64(n))
	case "bytesize":
		b, err := ParseByteSize(s)
		if err != nil {
			return err
		}
		f.SetInt(int64(b))
	case "duration":
		d, err := parseDuration(s)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
	case "enum":
		f.SetString(strings.ToLower(s))
	}
	return nil
}

// parseDuration parses a Go duration ("1.5s", "200ms") or a plain number of
// seconds ("30", "0.5").
func parseDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return seconds(f)
	}
	return 0, fmt.Errorf("invalid duration %q (use a number of seconds or a unit: \"200ms\", \"1.5s\", \"2m\")", s)
}

func seconds(v float64) (time.Duration, error) {
	f := v * float64(time.Second)
	if math.IsNaN(f) || f >= math.MaxInt64 || f <= math.MinInt64 {
		return 0, fmt.Errorf("duration of %v seconds is out of range", v)
	}
	return time.Duration(math.Round(f)), nil
}

// problem is a value the schema rejects, with the leaf that holds it.
type problem struct {
	leaf *leaf
	msg  string // does not name the key
}

// problems checks every value of c: enums among their values, numbers not
// negative, numbers tagged check:"positive" above zero, and those with a
// max tag no larger than it.
func (c *Config) problems() []problem {
	var ps []problem
	for _, s := range schema() {
		for _, l := range s.fields {
			f := l.field(c)
			bad := func(format string, args ...any) {
				ps = append(ps, problem{l, fmt.Sprintf(format, args...)})
			}
			switch kindOf(l.typ) {
			case "enum":
				if vs := f.Interface().(enum).values(); !slices.Contains(vs, f.String()) {
					bad("invalid value %q (allowed: %s)", f.String(), strings.Join(vs, ", "))
				}
			case "int", "bytesize", "duration":
				n := f.Int()
				switch {
				case n < 0:
					bad("must not be negative, found %s", strings.Trim(formatValue(l, f), `"`))
				case n == 0 && l.check == "positive":
					bad("must be greater than zero")
				case l.max > 0 && n > l.max:
					bad("must be at most %s, found %s", ByteSize(l.max), strings.Trim(formatValue(l, f), `"`))
				}
			}
		}
	}
	return ps
}

// formatValue writes the value of a leaf's field as it would appear in a file.
func formatValue(l *leaf, f reflect.Value) string {
	switch kindOf(l.typ) {
	case "bool":
		return strconv.FormatBool(f.Bool())
	case "int":
		return strconv.FormatInt(f.Int(), 10)
	case "bytesize":
		b := ByteSize(f.Int())
		s := b.String()
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return s
		}
		return strconv.Quote(s)
	case "duration":
		return strconv.Quote(time.Duration(f.Int()).String())
	case "enum":
		return quoteTOML(f.String())
	}
	return ""
}

// quoteTOML writes s as a TOML basic string.
func quoteTOML(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
