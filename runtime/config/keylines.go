package config

import (
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// KeyLines tells on which lines of a TOML document its keys are defined, so
// that errors found after decoding (unknown keys, invalid values) can name a
// line. The TOML library reports positions of syntax errors only. The
// launcher uses it for hosts.toml as well.
//
// Keys are written as [toml.Key.String] writes them ("dsm.prefetch_pages",
// `env."A B"`). Each element of an array of tables, whether written as
// [[host]] headers or as an inline array, is also known with its index:
// "host[1]" is the second element and "host[1].slots" its slots key, while
// "host.slots" collects the slots keys of all elements, in document order.
//
// KeyLines is built by a tolerant scanner: on a document that is not valid
// TOML it knows the keys before the first error.
type KeyLines struct {
	lines map[string][]int
}

// ScanKeyLines scans doc, a TOML document.
func ScanKeyLines(doc string) KeyLines {
	s := &keyScanner{src: doc, line: 1, kl: KeyLines{lines: map[string][]int{}}, arrays: map[string]int{}}
	s.document()
	return s.kl
}

// Line returns the line of the first definition of key. When key itself was
// never written (a table defined implicitly, a key taken from a default), it
// returns the line of its nearest written ancestor, and 0 if there is none.
func (kl KeyLines) Line(key string) int {
	for key != "" {
		if l := kl.lines[key]; len(l) > 0 {
			return l[0]
		}
		key = parentKey(key)
	}
	return 0
}

// Lines returns the lines of every definition of key, in document order
// (several for a key of an array of tables written without an index).
func (kl KeyLines) Lines(key string) []int { return kl.lines[key] }

// parentKey strips the last element of a key as KeyLines writes it:
// "a.b" → "a", "a[2]" → "a", "a[2].b" → "a[2]", `a."x.y"` → "a".
func parentKey(key string) string {
	cut := 0
	inQuote := false
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c == '\\' && inQuote:
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && (c == '.' || c == '['):
			cut = i
		}
	}
	return key[:cut]
}

// seg is one element of a key path; idx ≥ 0 selects an element of an array.
type seg struct {
	name string
	idx  int
}

type keyScanner struct {
	src    string
	pos    int
	line   int
	kl     KeyLines
	arrays map[string]int // indexed path of an array of tables → element count
	table  []seg          // current table
}

func indexed(path []seg) string {
	var b strings.Builder
	for i, p := range path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(toml.Key{p.name}.String())
		if p.idx >= 0 {
			b.WriteString("[" + strconv.Itoa(p.idx) + "]")
		}
	}
	return b.String()
}

func plain(path []seg) string {
	k := make(toml.Key, len(path))
	for i, p := range path {
		k[i] = p.name
	}
	return k.String()
}

func (s *keyScanner) record(path []seg, line int) {
	ix, pl := indexed(path), plain(path)
	s.kl.lines[ix] = append(s.kl.lines[ix], line)
	if pl != ix {
		s.kl.lines[pl] = append(s.kl.lines[pl], line)
	}
}

func (s *keyScanner) eof() bool { return s.pos >= len(s.src) }

func (s *keyScanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

func (s *keyScanner) advance() {
	if s.src[s.pos] == '\n' {
		s.line++
	}
	s.pos++
}

// skipSpace skips blanks and, if newlines is set, newlines and comments.
func (s *keyScanner) skipSpace(newlines bool) {
	for !s.eof() {
		switch c := s.peek(); {
		case c == ' ' || c == '\t':
			s.advance()
		case newlines && (c == '\n' || c == '\r'):
			s.advance()
		case newlines && c == '#':
			s.skipLine()
		default:
			return
		}
	}
}

// skipLine skips to the end of the line, not past the newline.
func (s *keyScanner) skipLine() {
	for !s.eof() && s.peek() != '\n' {
		s.advance()
	}
}

func (s *keyScanner) document() {
	for {
		s.skipSpace(true)
		if s.eof() {
			return
		}
		start := s.pos
		if s.peek() == '[' {
			s.header()
		} else {
			s.keyval(s.table)
		}
		if s.pos == start { // not TOML: give up
			return
		}
		s.skipLine()
	}
}

func (s *keyScanner) header() {
	line := s.line
	s.advance()
	array := s.peek() == '['
	if array {
		s.advance()
	}
	key, ok := s.key()
	if !ok {
		return
	}
	// Within a header, a prefix naming an array of tables means its last
	// element.
	path := make([]seg, 0, len(key))
	for i, name := range key {
		p := append(path, seg{name: name, idx: -1})
		if i == len(key)-1 && array {
			ix := indexed(p)
			p[len(p)-1].idx = s.arrays[ix]
			s.arrays[ix]++
		} else if n, ok := s.arrays[indexed(p)]; ok {
			p[len(p)-1].idx = n - 1
		}
		path = p
	}
	s.table = path
	s.record(path, line)
}

// key reads a possibly dotted key and the blanks around it.
func (s *keyScanner) key() ([]string, bool) {
	var parts []string
	for {
		s.skipSpace(false)
		if s.eof() {
			return nil, false
		}
		var part string
		switch c := s.peek(); c {
		case '"', '\'':
			start := s.pos
			s.stringValue()
			raw := s.src[start:s.pos]
			if c == '\'' {
				part = strings.Trim(raw, "'")
			} else if u, err := strconv.Unquote(raw); err == nil {
				part = u
			} else {
				part = strings.Trim(raw, `"`)
			}
		default:
			start := s.pos
			for !s.eof() && !strings.ContainsRune(" \t\r\n=.[]\"'#,{}", rune(s.peek())) {
				s.advance()
			}
			part = s.src[start:s.pos]
			if part == "" {
				return nil, false
			}
		}
		parts = append(parts, part)
		s.skipSpace(false)
		if s.peek() != '.' {
			return parts, true
		}
		s.advance()
	}
}

// keyval reads `key = value` within the table at prefix.
func (s *keyScanner) keyval(prefix []seg) {
	line := s.line
	key, ok := s.key()
	if !ok || s.peek() != '=' {
		return
	}
	s.advance()
	path := append([]seg(nil), prefix...)
	for _, k := range key {
		path = append(path, seg{name: k, idx: -1})
	}
	s.record(path, line)
	s.skipSpace(false)
	s.value(path)
}

func (s *keyScanner) value(path []seg) {
	switch s.peek() {
	case '"', '\'':
		s.stringValue()
	case '[':
		s.advance()
		for i := 0; ; i++ {
			s.skipSpace(true)
			if s.eof() {
				return
			}
			if s.peek() == ']' {
				s.advance()
				return
			}
			elem := append(append([]seg(nil), path[:len(path)-1]...), seg{name: path[len(path)-1].name, idx: i})
			if s.peek() == '{' {
				s.record(elem, s.line)
			}
			start := s.pos
			s.value(elem)
			s.skipSpace(true)
			if s.peek() == ',' {
				s.advance()
			} else if s.pos == start {
				return
			}
		}
	case '{':
		s.advance()
		for {
			s.skipSpace(true)
			if s.eof() {
				return
			}
			switch s.peek() {
			case '}':
				s.advance()
				return
			case ',':
				s.advance()
				continue
			}
			start := s.pos
			s.keyval(path)
			if s.pos == start {
				return
			}
		}
	default:
		for !s.eof() && !strings.ContainsRune(",]}#\r\n", rune(s.peek())) {
			s.advance()
		}
	}
}

// stringValue skips a basic or literal string, single- or multi-line.
func (s *keyScanner) stringValue() {
	q := s.peek()
	if strings.HasPrefix(s.src[s.pos:], strings.Repeat(string(q), 3)) {
		s.pos += 3
		for !s.eof() {
			if q == '"' && s.peek() == '\\' {
				s.advance()
				if !s.eof() {
					s.advance()
				}
				continue
			}
			if strings.HasPrefix(s.src[s.pos:], strings.Repeat(string(q), 3)) {
				s.pos += 3
				for i := 0; i < 2 && s.peek() == q; i++ { // up to two quotes end the content
					s.pos++
				}
				return
			}
			s.advance()
		}
		return
	}
	s.advance()
	for !s.eof() && s.peek() != '\n' {
		c := s.peek()
		s.advance()
		if c == '\\' && q == '"' && !s.eof() && s.peek() != '\n' {
			s.advance()
		} else if c == q {
			return
		}
	}
}

// ErrorLine returns the line of a TOML syntax error in doc. It counts lines
// up to the error's byte offset, because the library's own line number is
// one too far for an error found at a newline (an unclosed table header,
// an unterminated string).
func ErrorLine(doc string, pe toml.ParseError) int {
	off := pe.Position.Start
	if off < 0 || off > len(doc) || (off == 0 && pe.Position.Line > 1) {
		return pe.Position.Line
	}
	if off == len(doc) && off > 0 && doc[off-1] == '\n' {
		off-- // at the end of the file: the last line
	}
	return 1 + strings.Count(doc[:off], "\n")
}
