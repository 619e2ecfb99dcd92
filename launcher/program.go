package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ResolveProgram turns the PROGRAM argument of jiarun into the path of an
// executable. A name without a slash is looked up in PATH, as mpirun does.
// A directory holding a Go main package is built with `go build` into a
// temporary directory, with the compiler's output on log; cleanup removes
// it (cleanup is never nil). The returned error is a *UsageError when the
// argument names nothing runnable.
func ResolveProgram(prog string, log io.Writer) (path string, cleanup func(), err error) {
	cleanup = func() {}
	path, err = resolveProgram(prog, log, &cleanup)
	return path, cleanup, err
}

func resolveProgram(prog string, log io.Writer, cleanup *func()) (string, error) {
	if prog == "" {
		return "", usagef("no PROGRAM given (usage: jiarun [flags] PROGRAM [ARGS...])")
	}
	if !strings.Contains(prog, "/") {
		if st, err := os.Stat(prog); err == nil && st.IsDir() {
			return buildGoMain(prog, log, cleanup)
		}
		p, err := exec.LookPath(prog)
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return "", usagef("program %q: not found in PATH or the working directory", prog)
			}
			return "", usagef("program %q: %v", prog, err)
		}
		return filepath.Abs(p)
	}
	st, err := os.Stat(prog)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", usagef("program %q: no such file or directory", prog)
	case err != nil:
		return "", usagef("program %q: %v", prog, err)
	case st.IsDir():
		return buildGoMain(prog, log, cleanup)
	case !st.Mode().IsRegular():
		return "", usagef("program %q: not a regular file", prog)
	case st.Mode().Perm()&0o111 == 0:
		return "", usagef("program %q: not executable (permissions %v)", prog, st.Mode().Perm())
	}
	return filepath.Abs(prog)
}

// buildGoMain builds the Go main package in dir and returns the binary.
func buildGoMain(dir string, log io.Writer, cleanup *func()) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usagef("program %q: %v", dir, err)
	}
	ok, err := holdsGoMain(abs)
	if err != nil {
		return "", usagef("program %q: %v", dir, err)
	}
	if !ok {
		return "", usagef("program %q is a directory without a Go main package", dir)
	}
	buildDir, err := os.MkdirTemp("", "jiarun-build-")
	if err != nil {
		return "", fmt.Errorf("build directory: %w", err)
	}
	*cleanup = func() { os.RemoveAll(buildDir) }
	out := filepath.Join(buildDir, filepath.Base(abs))
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = abs
	var stderr bytes.Buffer
	cmd.Stdout = log
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		log.Write(stderr.Bytes())
		return "", usagef("program %q: go build failed: %v", dir, err)
	}
	return out, nil
}

// holdsGoMain reports whether dir has a non-test Go file in package main.
func holdsGoMain(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return false, err
		}
		if goPackageName(b) == "main" {
			return true, nil
		}
	}
	return false, nil
}

// goPackageName returns the name in a Go source file's package clause, or
// "" if it has none.
func goPackageName(src []byte) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.PackageClauseOnly)
	if err != nil {
		return ""
	}
	return f.Name.Name
}

// UsageError is bad input found before anything was started: jiarun prints
// it and exits with code 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}
