//go:build verbs

package verbs

/*
#include "jia_verbs.h"
*/
import "C"

import "github.com/jiarun/jia/rdmaio"

// constCheck pairs a value this package (or rdmaio) assumes with the value
// of verbs.h, for the verbs build's tests.
type constCheck struct {
	name      string
	ours, lib int64
}

// libConsts lists every verbs value the portable code hard-codes.
func libConsts() []constCheck {
	return []constCheck{
		{"IBV_QP_STATE", ibvQPState, C.IBV_QP_STATE},
		{"IBV_QP_ACCESS_FLAGS", ibvQPAccessFlags, C.IBV_QP_ACCESS_FLAGS},
		{"IBV_QP_PKEY_INDEX", ibvQPPKeyIndex, C.IBV_QP_PKEY_INDEX},
		{"IBV_QP_PORT", ibvQPPort, C.IBV_QP_PORT},
		{"IBV_QP_QKEY", ibvQPQKey, C.IBV_QP_QKEY},
		{"IBV_QP_AV", ibvQPAV, C.IBV_QP_AV},
		{"IBV_QP_PATH_MTU", ibvQPPathMTU, C.IBV_QP_PATH_MTU},
		{"IBV_QP_TIMEOUT", ibvQPTimeout, C.IBV_QP_TIMEOUT},
		{"IBV_QP_RETRY_CNT", ibvQPRetryCnt, C.IBV_QP_RETRY_CNT},
		{"IBV_QP_RNR_RETRY", ibvQPRNRRetry, C.IBV_QP_RNR_RETRY},
		{"IBV_QP_RQ_PSN", ibvQPRQPSN, C.IBV_QP_RQ_PSN},
		{"IBV_QP_MAX_QP_RD_ATOMIC", ibvQPMaxQPRdAtomic, C.IBV_QP_MAX_QP_RD_ATOMIC},
		{"IBV_QP_MIN_RNR_TIMER", ibvQPMinRNRTimer, C.IBV_QP_MIN_RNR_TIMER},
		{"IBV_QP_SQ_PSN", ibvQPSQPSN, C.IBV_QP_SQ_PSN},
		{"IBV_QP_MAX_DEST_RD_ATOMIC", ibvQPMaxDestRdAtomic, C.IBV_QP_MAX_DEST_RD_ATOMIC},
		{"IBV_QP_DEST_QPN", ibvQPDestQPN, C.IBV_QP_DEST_QPN},
		{"IBV_SEND_FENCE", ibvSendFence, C.IBV_SEND_FENCE},
		{"IBV_SEND_SIGNALED", ibvSendSignaled, C.IBV_SEND_SIGNALED},
		{"IBV_SEND_SOLICITED", ibvSendSolicited, C.IBV_SEND_SOLICITED},
		{"IBV_SEND_INLINE", ibvSendInline, C.IBV_SEND_INLINE},
		{"IBV_WC_GRH", ibvWCGRH, C.IBV_WC_GRH},
		{"IBV_WC_WITH_IMM", ibvWCWithImm, C.IBV_WC_WITH_IMM},
		{"IBV_PORT_ACTIVE", ibvPortActive, C.IBV_PORT_ACTIVE},
		{"IBV_GID_TYPE_IB", gidTypeIB, C.IBV_GID_TYPE_IB},
		{"IBV_GID_TYPE_ROCE_V1", gidTypeRoCEv1, C.IBV_GID_TYPE_ROCE_V1},
		{"IBV_GID_TYPE_ROCE_V2", gidTypeRoCEv2, C.IBV_GID_TYPE_ROCE_V2},
		{"IBV_LINK_LAYER_UNSPECIFIED", int64(linkUnspecified), C.IBV_LINK_LAYER_UNSPECIFIED},
		{"IBV_LINK_LAYER_INFINIBAND", int64(linkInfiniBand), C.IBV_LINK_LAYER_INFINIBAND},
		{"IBV_LINK_LAYER_ETHERNET", int64(linkEthernet), C.IBV_LINK_LAYER_ETHERNET},
		{"IBV_MTU_256", 1, C.IBV_MTU_256},
		{"IBV_MTU_4096", 5, C.IBV_MTU_4096},
		{"sizeof(struct ibv_grh)", grhLen, C.sizeof_struct_ibv_grh},

		{"IBV_ACCESS_LOCAL_WRITE", int64(rdmaio.AccessLocalWrite), C.IBV_ACCESS_LOCAL_WRITE},
		{"IBV_ACCESS_REMOTE_WRITE", int64(rdmaio.AccessRemoteWrite), C.IBV_ACCESS_REMOTE_WRITE},
		{"IBV_ACCESS_REMOTE_READ", int64(rdmaio.AccessRemoteRead), C.IBV_ACCESS_REMOTE_READ},
		{"IBV_ACCESS_REMOTE_ATOMIC", int64(rdmaio.AccessRemoteAtomic), C.IBV_ACCESS_REMOTE_ATOMIC},
		{"IBV_QPT_RC", int64(rdmaio.RC), C.IBV_QPT_RC},
		{"IBV_QPT_UD", int64(rdmaio.UD), C.IBV_QPT_UD},
		{"IBV_QPS_RESET", int64(rdmaio.StateReset), C.IBV_QPS_RESET},
		{"IBV_QPS_INIT", int64(rdmaio.StateInit), C.IBV_QPS_INIT},
		{"IBV_QPS_RTR", int64(rdmaio.StateRTR), C.IBV_QPS_RTR},
		{"IBV_QPS_RTS", int64(rdmaio.StateRTS), C.IBV_QPS_RTS},
		{"IBV_QPS_ERR", int64(rdmaio.StateErr), C.IBV_QPS_ERR},
		{"IBV_WR_RDMA_WRITE", int64(rdmaio.OpRDMAWrite), C.IBV_WR_RDMA_WRITE},
		{"IBV_WR_RDMA_WRITE_WITH_IMM", int64(rdmaio.OpRDMAWriteImm), C.IBV_WR_RDMA_WRITE_WITH_IMM},
		{"IBV_WR_SEND", int64(rdmaio.OpSend), C.IBV_WR_SEND},
		{"IBV_WR_SEND_WITH_IMM", int64(rdmaio.OpSendImm), C.IBV_WR_SEND_WITH_IMM},
		{"IBV_WR_RDMA_READ", int64(rdmaio.OpRDMARead), C.IBV_WR_RDMA_READ},
		{"IBV_WR_ATOMIC_CMP_AND_SWP", int64(rdmaio.OpAtomicCmpSwp), C.IBV_WR_ATOMIC_CMP_AND_SWP},
		{"IBV_WR_ATOMIC_FETCH_AND_ADD", int64(rdmaio.OpAtomicFetchAdd), C.IBV_WR_ATOMIC_FETCH_AND_ADD},
		{"IBV_WC_SEND", int64(rdmaio.WCSend), C.IBV_WC_SEND},
		{"IBV_WC_RDMA_WRITE", int64(rdmaio.WCRDMAWrite), C.IBV_WC_RDMA_WRITE},
		{"IBV_WC_RDMA_READ", int64(rdmaio.WCRDMARead), C.IBV_WC_RDMA_READ},
		{"IBV_WC_COMP_SWAP", int64(rdmaio.WCCompSwap), C.IBV_WC_COMP_SWAP},
		{"IBV_WC_FETCH_ADD", int64(rdmaio.WCFetchAdd), C.IBV_WC_FETCH_ADD},
		{"IBV_WC_RECV", int64(rdmaio.WCRecv), C.IBV_WC_RECV},
		{"IBV_WC_RECV_RDMA_WITH_IMM", int64(rdmaio.WCRecvRDMAWithImm), C.IBV_WC_RECV_RDMA_WITH_IMM},
		{"IBV_WC_SUCCESS", int64(rdmaio.StatusSuccess), C.IBV_WC_SUCCESS},
		{"IBV_WC_LOC_LEN_ERR", int64(rdmaio.StatusLocLenErr), C.IBV_WC_LOC_LEN_ERR},
		{"IBV_WC_LOC_QP_OP_ERR", int64(rdmaio.StatusLocQPOpErr), C.IBV_WC_LOC_QP_OP_ERR},
		{"IBV_WC_LOC_PROT_ERR", int64(rdmaio.StatusLocProtErr), C.IBV_WC_LOC_PROT_ERR},
		{"IBV_WC_WR_FLUSH_ERR", int64(rdmaio.StatusWRFlushErr), C.IBV_WC_WR_FLUSH_ERR},
		{"IBV_WC_BAD_RESP_ERR", int64(rdmaio.StatusBadRespErr), C.IBV_WC_BAD_RESP_ERR},
		{"IBV_WC_LOC_ACCESS_ERR", int64(rdmaio.StatusLocAccessErr), C.IBV_WC_LOC_ACCESS_ERR},
		{"IBV_WC_REM_INV_REQ_ERR", int64(rdmaio.StatusRemInvReqErr), C.IBV_WC_REM_INV_REQ_ERR},
		{"IBV_WC_REM_ACCESS_ERR", int64(rdmaio.StatusRemAccessErr), C.IBV_WC_REM_ACCESS_ERR},
		{"IBV_WC_REM_OP_ERR", int64(rdmaio.StatusRemOpErr), C.IBV_WC_REM_OP_ERR},
		{"IBV_WC_RETRY_EXC_ERR", int64(rdmaio.StatusRetryExcErr), C.IBV_WC_RETRY_EXC_ERR},
		{"IBV_WC_RNR_RETRY_EXC_ERR", int64(rdmaio.StatusRNRRetryExcErr), C.IBV_WC_RNR_RETRY_EXC_ERR},
		{"IBV_WC_REM_ABORT_ERR", int64(rdmaio.StatusRemAbortErr), C.IBV_WC_REM_ABORT_ERR},
		{"IBV_WC_FATAL_ERR", int64(rdmaio.StatusFatalErr), C.IBV_WC_FATAL_ERR},
		{"IBV_WC_RESP_TIMEOUT_ERR", int64(rdmaio.StatusRespTimeoutErr), C.IBV_WC_RESP_TIMEOUT_ERR},
		{"IBV_WC_GENERAL_ERR", int64(rdmaio.StatusGeneralErr), C.IBV_WC_GENERAL_ERR},
		{"IBV_WC_MW_BIND_ERR (unnamed in rdmaio)", int64(wcStatus(C.IBV_WC_MW_BIND_ERR)), int64(rdmaio.StatusGeneralErr)},
	}
}
