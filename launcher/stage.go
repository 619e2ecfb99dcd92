package launcher

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Staging copies jiarun itself and the program to each other host's cache
// directory (~/.cache/jiarun, or $XDG_CACHE_HOME/jiarun), keyed by the
// SHA-256 of the content, and skips hosts that already have them. jiarun
// goes first, through the launch agent and a few lines of sh; the program
// follows over the link, compressed with zstd. Each file is written under a
// temporary name, checked against its hash and only then renamed into
// place, so a partial transfer never runs.

// fileHash is a file's content hash and size.
type fileHash struct {
	Hash string
	Size int64
}

var hashCache sync.Map // path → fileHash

// hashFile returns the SHA-256 of the file at path.
func hashFile(path string) (fileHash, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileHash{}, err
	}
	key := path + "\x00" + strconv.FormatInt(st.Size(), 10) + "\x00" + st.ModTime().String()
	if h, ok := hashCache.Load(key); ok {
		return h.(fileHash), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fileHash{}, err
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, f)
	if err != nil {
		return fileHash{}, err
	}
	h := fileHash{Hash: hex.EncodeToString(sum.Sum(nil)), Size: n}
	hashCache.Store(key, h)
	return h, nil
}

// Markers the bootstrap script prints before the link begins.
const (
	markNeed  = "JIARUN-NEED"
	markReady = "JIARUN-READY"
)

// bootstrapScript is run by the launch agent on a host: it makes sure the
// cache holds jiarun with the given hash, receiving it on standard input if
// not (after printing JIARUN-NEED), then prints JIARUN-READY and becomes
// the proxy.
func bootstrapScript(h fileHash) string {
	return `d="${XDG_CACHE_HOME:-$HOME/.cache}/jiarun"; f="$d/jiarun-` + h.Hash + `"
if [ ! -x "$f" ]; then
  echo ` + markNeed + `
  mkdir -p "$d" || exit 97
  t="$f.part.$$"
  head -c ` + strconv.FormatInt(h.Size, 10) + ` > "$t" || { rm -f "$t"; exit 97; }
  echo "` + h.Hash + `  $t" | sha256sum -c --status || { rm -f "$t"; echo "jiarun: staged copy of jiarun failed its hash check" >&2; exit 97; }
  chmod 755 "$t" && mv -f "$t" "$f" || exit 97
fi
echo ` + markReady + `
exec "$f" proxy`
}

// agentCommand returns the argv that runs a command on host through the
// agent. ssh and rsh join their arguments into one line for the remote
// shell, so for them the command is passed as one quoted string.
func agentCommand(agent []string, host string, cmd ...string) []string {
	argv := append(append([]string(nil), agent...), host)
	switch filepath.Base(agent[0]) {
	case "ssh", "rsh":
		q := make([]string, len(cmd))
		for i, a := range cmd {
			q[i] = shellQuote(a)
		}
		return append(argv, strings.Join(q, " "))
	}
	return append(argv, cmd...)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bootstrap reads the script's markers on r, sending jiarun's binary on w
// when the host lacks it. It returns once the proxy is about to start.
func bootstrap(r *bufio.Reader, w io.Writer, binary string, host string, diag io.Writer) error {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("host %s: staging jiarun: %w", host, err)
		}
		switch strings.TrimSpace(line) {
		case markReady:
			return nil
		case markNeed:
			f, err := os.Open(binary)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("host %s: staging jiarun: %w", host, err)
			}
		default:
			// Whatever the login prints (a banner, a warning).
			fmt.Fprintf(diag, "jiarun: %s: %s", host, line)
		}
	}
}

// stageSpec asks a proxy for a program file by hash.
type stageSpec struct {
	Name string
	Hash string
	Size int64
}

// stageProgram makes sure the proxy's host has the program, sending it
// compressed if needed, and returns its path there. Frames from the proxy
// are read from r until its reply.
func stageProgram(w *linkWriter, r *bufio.Reader, path string, host string) (string, error) {
	h, err := hashFile(path)
	if err != nil {
		return "", err
	}
	if err := w.sendJSON(linkStage, stageSpec{Name: stagedName(path), Hash: h.Hash, Size: h.Size}); err != nil {
		return "", err
	}
	for {
		typ, body, err := readLinkFrame(r)
		if err != nil {
			return "", fmt.Errorf("host %s: staging %s: %w", host, path, err)
		}
		switch typ {
		case linkStaged:
			return string(body), nil
		case linkStageNeed:
			if err := sendCompressed(w, path); err != nil {
				return "", fmt.Errorf("host %s: staging %s: %w", host, path, err)
			}
		case linkFatal:
			return "", fmt.Errorf("host %s: staging %s: %s", host, path, body)
		default:
			return "", fmt.Errorf("host %s: staging %s: unexpected frame type %#x", host, path, typ)
		}
	}
}

// stagedName is the name a program is staged under: its file name, or the
// original file name when path is itself a staged copy (a proxy staging to
// the hosts below it).
func stagedName(path string) string {
	base := filepath.Base(path)
	if m := stagedPattern.FindStringSubmatch(base); m != nil {
		return m[1]
	}
	return base
}

// stagedPattern matches the names receiveStage gives.
var stagedPattern = regexp.MustCompile(`^prog-[0-9a-f]{16}-(.+)$`)

// sendCompressed streams the file as zstd in linkStageData frames, ending
// with an empty one.
func sendCompressed(w *linkWriter, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fw := &frameWriter{w: w, typ: linkStageData}
	zw, err := zstd.NewWriter(fw, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	if _, err := io.Copy(zw, f); err != nil {
		zw.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return w.send(linkStageData)
}

// frameWriter sends each Write as one frame of its type.
type frameWriter struct {
	w   *linkWriter
	typ byte
}

func (f *frameWriter) Write(b []byte) (int, error) {
	for off := 0; off < len(b); off += 1 << 20 {
		end := min(off+1<<20, len(b))
		if err := f.w.send(f.typ, b[off:end]); err != nil {
			return off, err
		}
	}
	return len(b), nil
}

// receiveStage is the proxy's side: it answers a stage request from the
// cache or receives the file, verifies it and renames it into place.
func receiveStage(w *linkWriter, r *bufio.Reader, body []byte) error {
	var s stageSpec
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	if len(s.Hash) != 64 || strings.ContainsAny(s.Name, "/\x00") || s.Name == "" || s.Name == "." || s.Name == ".." {
		return errors.New("stage: malformed request")
	}
	dir, err := cacheDir()
	if err != nil {
		return err
	}
	final := filepath.Join(dir, "prog-"+s.Hash[:16]+"-"+s.Name)
	if have, err := hashFile(final); err == nil && have.Hash == s.Hash {
		return w.send(linkStaged, []byte(final))
	}
	if err := w.send(linkStageNeed); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "prog-*.part")
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	defer os.Remove(tmp.Name())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		zr, err := zstd.NewReader(pr)
		if err != nil {
			pr.CloseWithError(err)
			done <- err
			return
		}
		defer zr.Close()
		sum := sha256.New()
		n, err := io.Copy(io.MultiWriter(tmp, sum), zr)
		if err == nil && (n != s.Size || hex.EncodeToString(sum.Sum(nil)) != s.Hash) {
			err = fmt.Errorf("stage: %s arrived with %d bytes and another hash: not used", s.Name, n)
		}
		io.Copy(io.Discard, pr)
		done <- err
	}()
	for {
		typ, data, err := readLinkFrame(r)
		if err != nil {
			pw.CloseWithError(err)
			<-done
			return fmt.Errorf("stage: %w", err)
		}
		if typ != linkStageData {
			pw.CloseWithError(errLinkPayload)
			<-done
			return fmt.Errorf("stage: unexpected frame type %#x", typ)
		}
		if len(data) == 0 {
			pw.Close()
			break
		}
		pw.Write(data)
	}
	if err := <-done; err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	return w.send(linkStaged, []byte(final))
}

// cacheDir is the proxy's staging directory, created if missing.
func cacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("stage: no cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(base, "jiarun")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("stage: %w", err)
	}
	return dir, nil
}
