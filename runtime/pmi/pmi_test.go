package pmi

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestEncodeEscapesSemicolonsAndPadsLength(t *testing.T) {
	b, err := Command{Name: "kvs-put", Pairs: [][2]string{{"key", "a"}, {"value", "x;y"}}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := "cmd=kvs-put;key=a;value=x;;y;"
	if got := string(b); got != fmt.Sprintf("%-6d", len(want))+want {
		t.Fatalf("got %q", got)
	}
	c, err := ReadCommand(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get("value"); c.Name != "kvs-put" || v != "x;y" {
		t.Fatalf("round trip gave %+v", c)
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, s := range []string{"", "cmd", "key=v;", "cmd=x;k=v", "cmd=x;=v;"} {
		if _, err := ParseCommand(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
	for _, s := range []string{"abcdef", "0     ", "99999999"} {
		if _, err := ReadCommand(strings.NewReader(s + "cmd=x;")); err == nil {
			t.Errorf("length field %q accepted", s)
		}
	}
}

func TestEncodeRejectsOversizedValues(t *testing.T) {
	if _, err := (Command{Name: "kvs-put", Pairs: [][2]string{{"value", strings.Repeat("v", MaxValLen+1)}}}).Encode(); err == nil {
		t.Fatal("value over the PMI-2 limit accepted")
	}
}

// fakePM is a minimal PMI-2 process manager, as Slurm's pmi2 plugin behaves.
type fakePM struct {
	size     int
	mu       sync.Mutex
	cond     *sync.Cond
	kvs      map[string]string
	pending  map[string]string
	arrived  int
	epoch    int
	finished int
}

func newFakePM(size int) *fakePM {
	pm := &fakePM{size: size, kvs: map[string]string{}, pending: map[string]string{}}
	pm.cond = sync.NewCond(&pm.mu)
	return pm
}

func (pm *fakePM) reply(c net.Conn, name string, pairs ...[2]string) {
	b, _ := Command{Name: name, Pairs: append([][2]string{{"rc", "0"}}, pairs...)}.Encode()
	c.Write(b)
}

func (pm *fakePM) serve(t *testing.T, c net.Conn, rank int) {
	defer c.Close()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "cmd=init pmi_version=2") {
		t.Errorf("init line %q, %v", line, err)
		return
	}
	fmt.Fprintf(c, "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
	for {
		cmd, err := ReadCommand(br)
		if err != nil {
			return
		}
		switch cmd.Name {
		case "fullinit":
			if r, _ := cmd.Get("pmirank"); r != strconv.Itoa(rank) {
				t.Errorf("fullinit rank %q, want %d", r, rank)
			}
			pm.reply(c, "fullinit-response", [2]string{"pmi-version", "2"}, [2]string{"pmi-subversion", "0"},
				[2]string{"rank", strconv.Itoa(rank)}, [2]string{"size", strconv.Itoa(pm.size)}, [2]string{"appnum", "0"})
		case "kvs-put":
			k, _ := cmd.Get("key")
			v, _ := cmd.Get("value")
			pm.mu.Lock()
			pm.pending[k] = v
			pm.mu.Unlock()
			pm.reply(c, "kvs-put-response")
		case "kvs-fence":
			pm.mu.Lock()
			e := pm.epoch
			pm.arrived++
			if pm.arrived == pm.size {
				for k, v := range pm.pending {
					pm.kvs[k] = v
				}
				pm.pending = map[string]string{}
				pm.arrived = 0
				pm.epoch++
				pm.cond.Broadcast()
			}
			for pm.epoch == e {
				pm.cond.Wait()
			}
			pm.mu.Unlock()
			pm.reply(c, "kvs-fence-response")
		case "kvs-get":
			k, _ := cmd.Get("key")
			pm.mu.Lock()
			v, ok := pm.kvs[k]
			pm.mu.Unlock()
			if ok {
				pm.reply(c, "kvs-get-response", [2]string{"found", "TRUE"}, [2]string{"value", v})
			} else {
				pm.reply(c, "kvs-get-response", [2]string{"found", "FALSE"})
			}
		case "finalize":
			pm.reply(c, "finalize-response")
			return
		default:
			t.Errorf("unexpected command %q", cmd.Name)
			return
		}
	}
}

func TestClientAgainstProcessManager(t *testing.T) {
	const n = 5
	pm := newFakePM(n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		client, server := net.Pipe()
		go pm.serve(t, server, r)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			defer client.Close()
			c, err := Init(client, "7.0", r)
			if err != nil {
				t.Error(err)
				return
			}
			if c.Rank != r || c.Size != n {
				t.Errorf("rank %d: fullinit gave %d of %d", r, c.Rank, c.Size)
			}
			if err := c.Put("card-"+strconv.Itoa(r), fmt.Sprintf("addr;of;%d", r)); err != nil {
				t.Error(err)
			}
			if err := c.Fence(); err != nil {
				t.Error(err)
			}
			for p := 0; p < n; p++ {
				v, err := c.Get("card-" + strconv.Itoa(p))
				if err != nil || v != fmt.Sprintf("addr;of;%d", p) {
					t.Errorf("rank %d: get card-%d = %q, %v", r, p, v, err)
				}
			}
			if _, err := c.Get("missing"); err == nil || !strings.Contains(err.Error(), "not found") {
				t.Errorf("get of a missing key: %v", err)
			}
			if err := c.Finalize(); err != nil {
				t.Error(err)
			}
		}(r)
	}
	wg.Wait()
}

func TestInitRefusedByPMI1OnlyManager(t *testing.T) {
	client, server := net.Pipe()
	go func() {
		br := bufio.NewReader(server)
		br.ReadString('\n')
		fmt.Fprintf(server, "cmd=response_to_init rc=-1 pmi_version=1 pmi_subversion=1\n")
		server.Close()
	}()
	_, err := Init(client, "", 0)
	if err == nil || !strings.Contains(err.Error(), "PMI version 2") {
		t.Fatalf("got %v", err)
	}
}

func FuzzParseCommand(f *testing.F) {
	f.Add("cmd=kvs-put;key=a;value=b;;c;")
	f.Add("cmd=fullinit-response;rc=0;rank=1;size=2;")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCommand(s)
		if err != nil {
			return
		}
		b, err := c.Encode()
		if err != nil {
			return
		}
		c2, err := ReadCommand(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("re-read of %q: %v", b, err)
		}
		if fmt.Sprint(c) != fmt.Sprint(c2) {
			t.Fatalf("round trip %+v != %+v", c, c2)
		}
	})
}
