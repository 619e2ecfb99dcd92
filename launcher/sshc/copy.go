package sshc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Copy writes the content of src to the file dst on the host, with
// permissions mode. dst may start with "~/" for the remote home directory;
// missing directories are created.
//
// The data streams over one session into a temporary file beside dst
// (sh, cat, sha256sum and mv on the remote side). The file is renamed to dst
// only when its SHA-256 matches the local one, so dst is either the complete,
// verified file or untouched: a partial transfer is never run. src is read
// twice (hash, then send), hence the Seeker.
func (c *Client) Copy(ctx context.Context, src io.ReadSeeker, dst string, mode fs.FileMode) error {
	h := sha256.New()
	n, err := io.Copy(h, src)
	if err != nil {
		return fmt.Errorf("host %s: copy to %s: reading source: %w", c.host, dst, err)
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("host %s: copy to %s: %w", c.host, dst, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	script := fmt.Sprintf(`set -e
dst=%s
dir=$(dirname "$dst")
mkdir -p "$dir"
tmp=$(mktemp "$dir/.jiarun-copy.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
sum=$(sha256sum "$tmp")
sum=${sum%%%% *}
if [ "$sum" != %s ]; then
  echo "sha256 mismatch: $(wc -c < "$tmp") bytes arrived with sha256 $sum, %d bytes with sha256 %s were sent" >&2
  exit 3
fi
chmod %04o "$tmp"
mv -f "$tmp" "$dst"
trap - EXIT
`, RemotePath(dst), sum, n, sum, mode.Perm())

	s, err := c.Start("sh -c " + ShellQuote(script))
	if err != nil {
		return err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	stderr := &tailBuffer{max: 2048}
	errDone := make(chan struct{})
	go func() {
		io.Copy(stderr, s.Stderr)
		close(errDone)
	}()
	go io.Copy(io.Discard, s.Stdout)
	_, werr := io.Copy(s.Stdin, src)
	s.Stdin.Close()
	err = s.s.Wait()
	<-errDone
	var ee *ssh.ExitError
	switch {
	case err == nil && werr == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("host %s: copy to %s: %w", c.host, dst, ctx.Err())
	case errors.As(err, &ee):
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = "remote side failed"
		}
		return fmt.Errorf("host %s: copy to %s: %s: %w", c.host, dst, msg, ee)
	case err != nil:
		return c.opErr("copy to "+dst, "", err)
	}
	return fmt.Errorf("host %s: copy to %s: %w", c.host, dst, werr)
}

// CopyFile copies the local file to dst on the host, keeping its
// permission bits; see Copy.
func (c *Client) CopyFile(ctx context.Context, local, dst string) error {
	f, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("host %s: copy %s: %w", c.host, local, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("host %s: copy %s: %w", c.host, local, err)
	}
	return c.Copy(ctx, f, dst, st.Mode())
}

// ShellQuote quotes s for a POSIX shell: plain words are left alone, and
// anything else is put in single quotes.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// RemotePath quotes a remote path for a POSIX shell, keeping a leading "~/"
// as the remote home directory ("$HOME"/…).
func RemotePath(p string) string {
	switch {
	case p == "~":
		return `"$HOME"`
	case strings.HasPrefix(p, "~/"):
		return `"$HOME"/` + ShellQuote(p[2:])
	}
	return ShellQuote(p)
}
