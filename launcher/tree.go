package launcher

// Tree fan-out. With more other hosts than the fan-out F, jiarun does not
// start every proxy itself: it starts the proxies of the first F hosts, and
// each proxy starts the proxies of its own children, which start theirs,
// and so on. The hosts form a complete F-ary tree in host-list order (the
// layout of Open MPI's radix routed tree, with jiarun as the root above
// host 0): the root's children are hosts 0..F-1, and host i's children are
// hosts (i+1)·F .. (i+1)·F+F-1. Start-up then takes about log_F(n) rounds
// of "start F proxies" instead of one round of n, and no machine holds more
// than F+1 links.

// DefaultFanout is the fan-out of the proxy tree unless --fanout says
// otherwise: as Open MPI's routed radix tree.
const DefaultFanout = 32

// proxyTree is the plan of who starts whom among n hosts (by index).
type proxyTree struct {
	// Roots are the hosts the root (jiarun) starts itself.
	Roots []int
	// Children[i] are the hosts whose proxies host i's proxy starts.
	Children [][]int
}

// planTree plans the start of n hosts with the given fan-out; fanout 0
// (or n ≤ fanout) starts every host from the root.
func planTree(n, fanout int) proxyTree {
	t := proxyTree{Children: make([][]int, max(n, 0))}
	if fanout <= 0 || n <= fanout {
		for i := range n {
			t.Roots = append(t.Roots, i)
		}
		return t
	}
	for i := range fanout {
		t.Roots = append(t.Roots, i)
	}
	for i := range n {
		for c := (i + 1) * fanout; c < (i+2)*fanout && c < n; c++ {
			t.Children[i] = append(t.Children[i], c)
		}
	}
	return t
}

// Subtree returns host i and every host below it, in start order
// (breadth first).
func (t proxyTree) Subtree(i int) []int {
	out := []int{i}
	for k := 0; k < len(out); k++ {
		out = append(out, t.Children[out[k]]...)
	}
	return out
}

// Depth is the number of proxy generations: 0 for no hosts, 1 when the
// root starts every proxy.
func (t proxyTree) Depth() int {
	d := 0
	level := t.Roots
	for len(level) > 0 {
		d++
		var next []int
		for _, i := range level {
			next = append(next, t.Children[i]...)
		}
		level = next
	}
	return d
}
