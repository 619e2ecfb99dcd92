package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestScanKeyLines(t *testing.T) {
	doc := `# comment
top = 1
[a]                      # 3
x = "a # not a comment"  # 4
"quoted key" = 'lit'     # 5
y.z = 3                  # 6
m = """
multi [x]
k = 2
"""                      # 7-10
arr = [                  # 11
  1, # comment
  [2, 3],
]
inline = { p = 1, q = { r = 2 },
  s = 3 }                # 15-16

[[host]]                 # 18
name = "n1"
env = { A = "1" }        # 20
[[host]]                 # 21
name = "n2"              # 22
[host.extra]             # 23
v = 1                    # 24
[[host.sub]]             # 25
w = 1                    # 26
list = [ { n = 1 },      # 27
         { n = 2 } ]     # 28
[ "b" . c ]              # 29
d = 1                    # 30
lit = '''
x = 1
'''
e = 2                    # 34
`
	kl := ScanKeyLines(doc)
	tests := []struct {
		key  string
		want int
	}{
		{"top", 2},
		{"a", 3},
		{"a.x", 4},
		{`a."quoted key"`, 5},
		{"a.y.z", 6},
		{"a.y", 3}, // defined implicitly by y.z: its nearest written ancestor is a
		{"a.m", 7},
		{"a.arr", 11},
		{"a.inline", 15},
		{"a.inline.p", 15},
		{"a.inline.q.r", 15},
		{"a.inline.s", 16},
		{"host", 18},
		{"host[0]", 18},
		{"host[0].name", 19},
		{"host[0].env.A", 20},
		{"host[1]", 21},
		{"host[1].name", 22},
		{"host[1].extra", 23},
		{"host[1].extra.v", 24},
		{"host[1].sub[0]", 25},
		{"host[1].sub[0].w", 26},
		{"host[1].sub[0].list[0].n", 27},
		{"host[1].sub[0].list[1].n", 28},
		{"host[1].sub[0].list[1]", 28},
		{"host.sub.list.n", 27},
		{"b.c", 29},
		{"b.c.d", 30},
		{"b.c.e", 34},
		{"b.c.missing", 29},
		{"host[1].nothing", 21},
		{"missing", 0},
	}
	for _, tt := range tests {
		if got := kl.Line(tt.key); got != tt.want {
			t.Errorf("Line(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
	if got, want := kl.Lines("host.name"), []int{19, 22}; !slices.Equal(got, want) {
		t.Errorf("Lines(host.name) = %v, want %v", got, want)
	}
	if got, want := kl.Lines("host"), []int{18, 21}; !slices.Equal(got, want) {
		t.Errorf("Lines(host) = %v, want %v", got, want)
	}
}

func TestScanKeyLinesTolerant(t *testing.T) {
	// Not TOML: no panic, keys before the damage are known.
	for _, doc := range []string{
		"a = 1\nnode01 slots=4\nb = 2\n",
		"a = \"unterminated\n",
		"[unterminated\n",
		"x = [1, 2\n",
		"y = {",
		"z = '''never closed",
		"= 3",
		"[[]]",
	} {
		kl := ScanKeyLines(doc)
		_ = kl.Line("a")
	}
	if got := ScanKeyLines("a = 1\nnode01 slots=4\n").Line("a"); got != 1 {
		t.Errorf("Line(a) = %d, want 1", got)
	}
}

func TestParentKey(t *testing.T) {
	for key, want := range map[string]string{
		"a": "", "a.b": "a", "a[2]": "a", "a[2].b": "a[2]", `a."x.y"`: "a", `a."x[1]"`: "a", `"q\"a.b".c`: `"q\"a.b"`,
	} {
		if got := parentKey(key); got != want {
			t.Errorf("parentKey(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "", 3}, {"dsm", "dms", 1}, {"prefech", "prefetch", 1}, {"kitten", "sitting", 3}} {
		if got := editDistance(tt.a, tt.b); got != tt.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.d)
		}
	}
}

func TestErrorLine(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		line int
	}{
		{"[transport\nkind = 1\n", 1},
		{"[dsm]\nstats = tru\n", 2},
		{"a = \"x\nb = 1\n", 1},
		{"a = 1\nb = [1,\n", 2},
		{"a = 1\n\n\nx = {\n", 4},
		{"a = 1\nx = {", 2},
		{"= 1\n", 1},
	} {
		var m map[string]any
		_, err := toml.Decode(tt.doc, &m)
		pe, ok := errors.AsType[toml.ParseError](err)
		if !ok {
			t.Errorf("%q: not a ParseError: %v", tt.doc, err)
			continue
		}
		if got := ErrorLine(tt.doc, pe); got != tt.line {
			t.Errorf("ErrorLine(%q) = %d, want %d (library: %d)", tt.doc, got, tt.line, pe.Position.Line)
		}
	}
}

// FuzzScanKeyLines checks that the scanner neither panics nor loops on any
// input, and that on valid TOML it locates every key the library decodes.
func FuzzScanKeyLines(f *testing.F) {
	for _, seed := range []string{
		"a = 1\n[b]\nc = 'x'\n[[d]]\ne = [1, {f = 2}]\n",
		"x = \"\"\"\nk = 1\n\"\"\"\ny = 2\n",
		"t = { a.b = 1, 'c d' = { e = 3 } }\n",
		"[[a.b]]\n[a.b.c]\nd = 1\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		kl := ScanKeyLines(doc)
		var m map[string]any
		md, err := toml.Decode(doc, &m)
		if err != nil {
			return
		}
		lines := strings.Count(doc, "\n") + 1
		for _, k := range md.Keys() {
			if l := kl.Line(k.String()); l < 1 || l > lines {
				t.Errorf("key %q: line %d, document has %d lines", k, l, lines)
			}
		}
	})
}
