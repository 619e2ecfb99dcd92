//go:build verbs

package verbs

/*
#include "jia_verbs.h"

// A fake device context for tests of the posting and polling paths on
// machines without RDMA hardware: libibverbs' post and poll calls dispatch
// through ctx.ops, which here record the work requests as a device would
// read them and return scripted completions.
struct jia_fake_send {
	uint64_t wr_id;
	uint32_t opcode, flags, nsge, rkey, rqpn, rqkey, has_ah, next_ok;
	uint8_t imm[4];
	uint64_t raddr, compare_add, swap;
	struct ibv_sge sge[8];
	uint8_t inline_data[64];
	uint32_t inline_len;
};

struct jia_fake_recv {
	uint64_t wr_id;
	uint32_t nsge;
	struct ibv_sge sge[8];
};

struct jia_fake {
	struct ibv_context ctx;
	struct ibv_qp qp;
	struct ibv_cq cq;
	struct jia_fake_send sent[256];
	int nsent;
	struct jia_fake_recv recvd[256];
	int nrecvd;
	int posts;
	int fail_at;
	struct ibv_wc wc[64];
	int nwc, wcpos;
};

static int jia_fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	struct jia_fake *f = (struct jia_fake *)qp->context;
	f->posts++;
	for (int i = 0; wr; wr = wr->next, i++) {
		if (i == f->fail_at || f->nsent == 256 || wr->num_sge > 8) {
			*bad = wr;
			return ENOMEM;
		}
		struct jia_fake_send *s = &f->sent[f->nsent++];
		memset(s, 0, sizeof *s);
		s->wr_id = wr->wr_id;
		s->opcode = wr->opcode;
		s->flags = wr->send_flags;
		s->nsge = wr->num_sge;
		s->next_ok = wr->next == NULL || wr->next == wr + 1;
		memcpy(s->imm, &wr->imm_data, 4);
		if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			s->raddr = wr->wr.atomic.remote_addr;
			s->rkey = wr->wr.atomic.rkey;
			s->compare_add = wr->wr.atomic.compare_add;
			s->swap = wr->wr.atomic.swap;
		} else if (wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_IMM) {
			s->has_ah = wr->wr.ud.ah != NULL;
			s->rqpn = wr->wr.ud.remote_qpn;
			s->rqkey = wr->wr.ud.remote_qkey;
		} else {
			s->raddr = wr->wr.rdma.remote_addr;
			s->rkey = wr->wr.rdma.rkey;
		}
		for (int k = 0; k < wr->num_sge; k++) {
			s->sge[k] = wr->sg_list[k];
			if ((wr->send_flags & IBV_SEND_INLINE) && s->inline_len + wr->sg_list[k].length <= 64) {
				memcpy(s->inline_data + s->inline_len, (void *)(uintptr_t)wr->sg_list[k].addr, wr->sg_list[k].length);
				s->inline_len += wr->sg_list[k].length;
			}
		}
	}
	return 0;
}

static int jia_fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct jia_fake *f = (struct jia_fake *)qp->context;
	f->posts++;
	for (int i = 0; wr; wr = wr->next, i++) {
		if (i == f->fail_at || f->nrecvd == 256 || wr->num_sge > 8) {
			*bad = wr;
			return ENOMEM;
		}
		struct jia_fake_recv *r = &f->recvd[f->nrecvd++];
		r->wr_id = wr->wr_id;
		r->nsge = wr->num_sge;
		for (int k = 0; k < wr->num_sge; k++)
			r->sge[k] = wr->sg_list[k];
	}
	return 0;
}

static int jia_fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	struct jia_fake *f = (struct jia_fake *)cq->context;
	int k = 0;
	while (k < n && f->wcpos < f->nwc)
		wc[k++] = f->wc[f->wcpos++];
	return k;
}

static struct jia_fake *jia_fake_new(void) {
	struct jia_fake *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->ctx.ops.post_send = jia_fake_post_send;
	f->ctx.ops.post_recv = jia_fake_post_recv;
	f->ctx.ops.poll_cq = jia_fake_poll_cq;
	f->qp.context = &f->ctx;
	f->cq.context = &f->ctx;
	f->cq.cqe = 1 << 20;
	f->fail_at = -1;
	return f;
}

static void jia_fake_wc(struct jia_fake *f, uint64_t wr_id, uint32_t status, uint32_t opcode, uint32_t byte_len,
			uint32_t imm, uint32_t qp_num, uint32_t src_qp, uint32_t flags, uint16_t slid) {
	struct ibv_wc *w = &f->wc[f->nwc++];
	memset(w, 0, sizeof *w);
	w->wr_id = wr_id;
	w->status = (enum ibv_wc_status)status;
	w->opcode = (enum ibv_wc_opcode)opcode;
	w->byte_len = byte_len;
	w->imm_data = htonl(imm);
	w->qp_num = qp_num;
	w->src_qp = src_qp;
	w->wc_flags = flags;
	w->slid = slid;
}
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// fakeLKey is the local key of the UD header slots of fake QPs.
const fakeLKey = 0x77

// fakeHW is a fake adapter for tests: see jia_fake above.
type fakeHW struct{ f *C.struct_jia_fake }

func newFakeHW() *fakeHW {
	f := C.jia_fake_new()
	if f == nil {
		panic("verbs: out of memory for the fake adapter")
	}
	return &fakeHW{f: f}
}

// newFakeDevice returns a device on the fake adapter with the given local
// address and limits; only the posting and polling paths work.
func newFakeDevice(local portAddr, attr rdmaio.DeviceAttr) (*Device, error) {
	d := &Device{name: "fake0", local: local, attr: attr, maxCQE: 1 << 20,
		byNum: map[uint32]*qp{}, byGID: map[[16]byte]int32{}, byLID: map[uint16]int32{}, cqs: map[*cq]struct{}{}}
	d.blob = local.encode()
	d.opt.policy = defaultPolicy(1)
	var err error
	d.wqs, err = provider.NewKeyTable[workQueue](64)
	return d, err
}

// cq returns a CQ of d on the fake adapter.
func (h *fakeHW) cq(d *Device) (*cq, error) { return d.wrapCQ(&h.f.cq, nil, -1) }

// qp returns a QP in RTS on the fake adapter.
func (h *fakeHW) qp(d *Device, typ rdmaio.QPType, cp rdmaio.QPCap, c *cq, sigAll bool, num uint32) (*qp, error) {
	q := &qp{dev: d, pd: &pd{dev: d}, typ: typ, cap: cp, sigAll: sigAll, scq: c, rcq: c, c: &h.f.qp, num: num}
	q.limits.Type, q.limits.Cap, q.limits.MTU, q.limits.MaxMsgSize = typ, cp, d.attr.MTU, d.attr.MaxMsgSize
	if err := q.initQueues(); err != nil {
		return nil, err
	}
	if q.rp != nil {
		q.rp.grhLKey = fakeLKey
	}
	q.state.Store(uint32(rdmaio.StateRTS))
	d.byNum[num] = q
	return q, nil
}

// fakeAH returns an address handle whose C pointer is only a marker.
func (h *fakeHW) ah(d *Device) *ah {
	return &ah{pd: &pd{dev: d}, a: (*C.struct_ibv_ah)(unsafe.Pointer(&h.f.ctx))}
}

// freeQP frees the software side of a fake QP.
func (h *fakeHW) freeQP(q *qp) {
	q.c = nil
	q.release()
}

func (h *fakeHW) free(c *cq) {
	C.free(unsafe.Pointer(c.wcs))
	C.free(unsafe.Pointer(h.f))
}

// fakeSend is a send work request as the fake adapter read it.
type fakeSend struct {
	id                      uint64
	opcode, flags           uint32
	sgl                     []rdmaio.SGE
	inline                  []byte
	imm                     uint32 // decoded from network byte order
	raddr, compareAdd, swap uint64
	rkey, rqpn, rqkey       uint32
	hasAH, chained          bool
}

func (h *fakeHW) sent() []fakeSend {
	var out []fakeSend
	for i := 0; i < int(h.f.nsent); i++ {
		s := &h.f.sent[i]
		fs := fakeSend{id: uint64(s.wr_id), opcode: uint32(s.opcode), flags: uint32(s.flags),
			raddr: uint64(s.raddr), compareAdd: uint64(s.compare_add), swap: uint64(s.swap),
			rkey: uint32(s.rkey), rqpn: uint32(s.rqpn), rqkey: uint32(s.rqkey), hasAH: s.has_ah != 0, chained: s.next_ok != 0}
		fs.imm = binary.BigEndian.Uint32(C.GoBytes(unsafe.Pointer(&s.imm[0]), 4))
		for k := 0; k < int(s.nsge); k++ {
			fs.sgl = append(fs.sgl, rdmaio.SGE{Addr: uint64(s.sge[k].addr), Length: uint32(s.sge[k].length), LKey: uint32(s.sge[k].lkey)})
		}
		fs.inline = C.GoBytes(unsafe.Pointer(&s.inline_data[0]), C.int(s.inline_len))
		out = append(out, fs)
	}
	return out
}

// fakeRecv is a receive work request as the fake adapter read it.
type fakeRecv struct {
	id  uint64
	sgl []rdmaio.SGE
}

func (h *fakeHW) recvd() []fakeRecv {
	var out []fakeRecv
	for i := 0; i < int(h.f.nrecvd); i++ {
		r := &h.f.recvd[i]
		fr := fakeRecv{id: uint64(r.wr_id)}
		for k := 0; k < int(r.nsge); k++ {
			fr.sgl = append(fr.sgl, rdmaio.SGE{Addr: uint64(r.sge[k].addr), Length: uint32(r.sge[k].length), LKey: uint32(r.sge[k].lkey)})
		}
		out = append(out, fr)
	}
	return out
}

func (h *fakeHW) posts() int    { return int(h.f.posts) }
func (h *fakeHW) failAt(i int)  { h.f.fail_at = C.int(i) }
func (h *fakeHW) resetRecords() { h.f.nsent, h.f.nrecvd, h.f.posts = 0, 0, 0 }

// fakeWC is a completion for the fake adapter to return.
type fakeWC struct {
	wrID                                uint64
	status, opcode, byteLen, imm, qpNum uint32
	srcQP, flags                        uint32
	slid                                uint16
}

func (h *fakeHW) complete(ws ...fakeWC) {
	for _, w := range ws {
		C.jia_fake_wc(h.f, C.uint64_t(w.wrID), C.uint32_t(w.status), C.uint32_t(w.opcode), C.uint32_t(w.byteLen),
			C.uint32_t(w.imm), C.uint32_t(w.qpNum), C.uint32_t(w.srcQP), C.uint32_t(w.flags), C.uint16_t(w.slid))
	}
}

func (h *fakeHW) resetCompletions() { h.f.nwc, h.f.wcpos = 0, 0 }

// completeLast completes the last send and receive recorded, successfully,
// without allocating.
func (h *fakeHW) completeLast() {
	s := &h.f.sent[h.f.nsent-1]
	C.jia_fake_wc(h.f, s.wr_id, 0, C.uint32_t(rdmaio.WCRDMAWrite), 0, 0, h.f.qp.qp_num, 0, 0, 0)
	r := &h.f.recvd[h.f.nrecvd-1]
	C.jia_fake_wc(h.f, r.wr_id, 0, C.uint32_t(rdmaio.WCRecv), 64, 0, h.f.qp.qp_num, 0, 0, 0)
}
