package e2e

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jiarun/jia/e2e/cluster"
)

// TestOpenSSHAgentTree runs the proxy tree with OpenSSH's own client as the
// launch agent (--launch-agent "ssh -F CONFIG"): a chain of three namespace
// hosts, each proxy starting the next with the ssh command. OpenSSH starts a
// remote command without a terminal, so when a session drops the remote
// proxy is not killed by sshd: it must notice its lost parent by itself.
func TestOpenSSHAgentTree(t *testing.T) {
	c := cluster.Up(t, 3)
	hosts := c.Names()
	agent := "ssh -F " + c.SSHConfig
	hl := hosts[0] + ":2," + hosts[1] + ":2," + hosts[2] + ":2"
	base := []string{"--launch-agent", agent, "--fanout", "1", "-H", hl}
	prog := copyProg(t)

	t.Run("hello down a chain started by ssh", func(t *testing.T) {
		r := run(t, "", append(append([]string{"-np", "6"}, base...), hello)...)
		checkHello(t, r, hosts)
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("a rank killed at the end of the chain stops every host", func(t *testing.T) {
		r := run(t, "", append(append([]string{"-np", "6"}, base...), prog, "signal", "5", "9")...)
		if r.code != 137 {
			t.Fatalf("want exit 137\n%v", r)
		}
		if !regexp.MustCompile(`rank 5 \(pid \d+ on ` + hosts[2] + `\) was killed by signal 9`).MatchString(r.stderr) {
			t.Errorf("message does not name rank 5 on %s\n%v", hosts[2], r)
		}
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("kill -9 of jiarun leaves nothing on any host", func(t *testing.T) {
		cmd, _, _ := startHeld(t, prog, 6, base...)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		nothingLeftOnHosts(t, c, 6*time.Second)
	})
}

// nothingLeftOnHosts fails the test if any rank program or proxy still runs
// on any of the cluster's hosts, waiting up to d for them to go.
func nothingLeftOnHosts(t *testing.T, c *cluster.Cluster, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var left []string
		for _, h := range c.Names() {
			for _, p := range c.Procs(h) {
				cmd := strings.Join(p.Args, " ")
				if strings.Contains(cmd, "rankprog") || strings.Contains(cmd, "proxy") || strings.Contains(cmd, "/hello") {
					left = append(left, h+": "+p.String())
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running %v after the job ended:\n%s", d, strings.Join(left, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
