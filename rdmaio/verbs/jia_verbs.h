// Helpers of the verbs provider (build tag verbs): flat structures that Go
// fills without unions, and the calls that turn them into libibverbs
// structures, so that a chain of work requests or a batch of completions
// crosses from Go to C in one call.
#ifndef JIA_VERBS_H
#define JIA_VERBS_H

#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct jia_swr {
	uint64_t wr_id;
	uint64_t raddr;
	uint64_t compare_add;
	uint64_t swap;
	struct ibv_ah *ah;
	uint32_t rkey;
	uint32_t imm;
	uint32_t rqpn;
	uint32_t rqkey;
	uint32_t opcode;
	uint32_t flags;
	uint32_t nsge;
	uint32_t pad;
};

struct jia_rwr {
	uint64_t wr_id;
	uint32_t nsge;
	uint32_t pad;
};

struct jia_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t slid;
	uint16_t pad;
	uint32_t pad2;
};

struct jia_ah {
	uint8_t global;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t port;
	uint16_t dlid;
	uint16_t pad;
	uint8_t dgid[16];
};

struct jia_qp_attr {
	uint32_t mask;
	uint32_t state;
	uint32_t access;
	uint32_t qkey;
	uint32_t dest_qpn;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint16_t pkey_index;
	uint8_t port;
	uint8_t path_mtu;
	uint8_t min_rnr_timer;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint16_t pad;
	struct jia_ah ah;
};

static inline void jia_ah_attr(struct ibv_ah_attr *a, const struct jia_ah *s) {
	memset(a, 0, sizeof *a);
	a->dlid = s->dlid;
	a->port_num = s->port;
	if (s->global) {
		a->is_global = 1;
		memcpy(a->grh.dgid.raw, s->dgid, 16);
		a->grh.sgid_index = s->sgid_index;
		a->grh.hop_limit = s->hop_limit;
	}
}

// jia_post_send builds the chain of n work requests d (with their SGEs
// consecutive in sge) in wrs and posts it. *posted is the number the
// hardware accepted.
static inline int jia_post_send(struct ibv_qp *qp, const struct jia_swr *d, int n, struct ibv_sge *sge,
				struct ibv_send_wr *wrs, int *posted) {
	struct ibv_sge *s = sge;
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];
		memset(w, 0, sizeof *w);
		w->wr_id = d[i].wr_id;
		w->sg_list = d[i].nsge ? s : NULL;
		w->num_sge = (int)d[i].nsge;
		s += d[i].nsge;
		w->opcode = (enum ibv_wr_opcode)d[i].opcode;
		w->send_flags = d[i].flags;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		switch (d[i].opcode) {
		case IBV_WR_SEND_WITH_IMM:
			w->imm_data = htonl(d[i].imm);
			break;
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htonl(d[i].imm);
			w->wr.rdma.remote_addr = d[i].raddr;
			w->wr.rdma.rkey = d[i].rkey;
			break;
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_READ:
			w->wr.rdma.remote_addr = d[i].raddr;
			w->wr.rdma.rkey = d[i].rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			w->wr.atomic.remote_addr = d[i].raddr;
			w->wr.atomic.rkey = d[i].rkey;
			w->wr.atomic.compare_add = d[i].compare_add;
			w->wr.atomic.swap = d[i].swap;
			break;
		default:
			break;
		}
		if (d[i].ah) {
			w->wr.ud.ah = d[i].ah;
			w->wr.ud.remote_qpn = d[i].rqpn;
			w->wr.ud.remote_qkey = d[i].rqkey;
		}
	}
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wrs, &bad);
	*posted = rc == 0 ? n : (bad ? (int)(bad - wrs) : 0);
	return rc;
}

// jia_post_recv is jia_post_send for receives, to a QP or (qp NULL) an SRQ.
static inline int jia_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, const struct jia_rwr *d, int n,
				struct ibv_sge *sge, struct ibv_recv_wr *wrs, int *posted) {
	struct ibv_sge *s = sge;
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &wrs[i];
		w->wr_id = d[i].wr_id;
		w->sg_list = d[i].nsge ? s : NULL;
		w->num_sge = (int)d[i].nsge;
		s += d[i].nsge;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
	}
	struct ibv_recv_wr *bad = NULL;
	int rc = qp ? ibv_post_recv(qp, wrs, &bad) : ibv_post_srq_recv(srq, wrs, &bad);
	*posted = rc == 0 ? n : (bad ? (int)(bad - wrs) : 0);
	return rc;
}

// jia_poll takes up to n (at most 64) completions into out.
static inline int jia_poll(struct ibv_cq *cq, int n, struct jia_wc *out) {
	struct ibv_wc wc[64];
	if (n > 64)
		n = 64;
	int k = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < k; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].src_qp = wc[i].src_qp;
		out[i].wc_flags = wc[i].wc_flags;
		out[i].slid = wc[i].slid;
	}
	return k;
}

// jia_modify_qp applies a transition described by a.
static inline int jia_modify_qp(struct ibv_qp *qp, const struct jia_qp_attr *a) {
	struct ibv_qp_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.qp_state = (enum ibv_qp_state)a->state;
	attr.qp_access_flags = a->access;
	attr.qkey = a->qkey;
	attr.dest_qp_num = a->dest_qpn;
	attr.rq_psn = a->rq_psn;
	attr.sq_psn = a->sq_psn;
	attr.pkey_index = a->pkey_index;
	attr.port_num = a->port;
	attr.path_mtu = (enum ibv_mtu)a->path_mtu;
	attr.min_rnr_timer = a->min_rnr_timer;
	attr.timeout = a->timeout;
	attr.retry_cnt = a->retry_cnt;
	attr.rnr_retry = a->rnr_retry;
	attr.max_rd_atomic = a->max_rd_atomic;
	attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
	jia_ah_attr(&attr.ah_attr, &a->ah);
	return ibv_modify_qp(qp, &attr, (int)a->mask);
}

// jia_create_ah creates an address handle; NULL with errno on failure.
static inline struct ibv_ah *jia_create_ah(struct ibv_pd *pd, const struct jia_ah *s) {
	struct ibv_ah_attr a;
	jia_ah_attr(&a, s);
	return ibv_create_ah(pd, &a);
}

// jia_reg_mr registers [addr, addr+len) (ibv_reg_mr is a macro).
static inline struct ibv_mr *jia_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access) {
	return ibv_reg_mr(pd, (void *)addr, len, access);
}

// jia_query_gid reads GID table entry index of port: 0 on success.
static inline int jia_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t *gid, uint32_t *type) {
	struct ibv_gid_entry e;
	int rc = ibv_query_gid_ex(ctx, port, (uint32_t)index, &e, 0);
	if (rc != 0)
		return rc;
	memcpy(gid, e.gid.raw, 16);
	*type = e.gid_type;
	return 0;
}

// jia_create_qp creates a QP; cap is updated to the sizes in effect.
static inline struct ibv_qp *jia_create_qp(struct ibv_pd *pd, int type, struct ibv_cq *scq, struct ibv_cq *rcq,
					   struct ibv_srq *srq, int sig_all, struct ibv_qp_cap *cap) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = (enum ibv_qp_type)type;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.sq_sig_all = sig_all;
	a.cap = *cap;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (qp)
		*cap = a.cap;
	return qp;
}

// jia_create_srq creates a shared receive queue.
static inline struct ibv_srq *jia_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t max_sge) {
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof a);
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	return ibv_create_srq(pd, &a);
}

// jia_cq_event takes one event from a completion channel and acknowledges
// it: 1 when one was taken, 0 when none was pending.
static inline int jia_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx) != 0)
		return 0;
	ibv_ack_cq_events(cq, 1);
	return 1;
}

// jia_query_port queries a port (ibv_query_port is a macro).
static inline int jia_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa) {
	return ibv_query_port(ctx, port, pa);
}

#endif
