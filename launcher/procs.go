package launcher

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// spawned is a started rank process and the read ends of its output.
type spawned struct {
	cmd         *exec.Cmd
	stdout      *os.File
	stderr      *os.File
	stdinW      *os.File  // write end of the rank's stdin pipe, if it has one
	stdinFrom   io.Reader // what to copy into stdinW
	stdinPassed bool      // the rank reads stdinFile directly
}

// spawn starts one rank process in its own process group, with a
// parent-death signal so it cannot outlive its parent (jiarun or the
// host's proxy). stdin, if not nil, becomes the rank's standard input: a
// file that is not a terminal is passed as it is, anything else through a
// pipe the caller fills (so a rank in a background process group never
// reads the terminal). Without stdin the rank reads /dev/null. A cpu of 0
// or more binds the rank to that processor (see bindCPU).
func spawn(rank int, prog string, args, env []string, dir string, stdin io.Reader, cpu int) (*spawned, error) {
	cmd := &exec.Cmd{
		Path: prog,
		Args: append([]string{prog}, args...),
		Env:  env,
		Dir:  dir,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("rank %d: stdout pipe: %w", rank, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("rank %d: stderr pipe: %w", rank, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	sp := &spawned{cmd: cmd, stdout: outR, stderr: errR}
	var stdinR *os.File
	if stdin != nil {
		if f, ok := stdin.(*os.File); ok && !isTerminal(f) {
			cmd.Stdin = f
			sp.stdinPassed = true
		} else {
			r, w, err := os.Pipe()
			if err != nil {
				outR.Close()
				outW.Close()
				errR.Close()
				errW.Close()
				return nil, fmt.Errorf("rank %d: stdin pipe: %w", rank, err)
			}
			cmd.Stdin, stdinR, sp.stdinW, sp.stdinFrom = r, r, w, stdin
		}
	}
	err = startBound(cpu, cmd.Start)
	outW.Close()
	errW.Close()
	if stdinR != nil {
		stdinR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if sp.stdinW != nil {
			sp.stdinW.Close()
		}
		return nil, fmt.Errorf("rank %d: start %s: %w", rank, prog, err)
	}
	if sp.stdinW != nil {
		go func() {
			io.Copy(sp.stdinW, sp.stdinFrom)
			sp.stdinW.Close()
		}()
	}
	return sp, nil
}

// exitStatus is how a rank ended: its exit code, or the signal that
// killed it, or an error if jiarun could not tell.
type exitStatus struct {
	code int
	sig  syscall.Signal // 0 unless killed by a signal
	err  error
}

func statusOf(st *os.ProcessState, err error) exitStatus {
	if st == nil {
		if err == nil {
			err = fmt.Errorf("no exit status")
		}
		return exitStatus{code: -1, err: err}
	}
	ws := st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return exitStatus{code: -1, sig: ws.Signal()}
	}
	return exitStatus{code: ws.ExitStatus()}
}

func (e exitStatus) success() bool { return e.err == nil && e.sig == 0 && e.code == 0 }
