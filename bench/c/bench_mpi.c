/* bench_mpi: the C MPI twin of apps/bench, with the same tests, sizes,
 * iteration counts and output ("size value" lines on rank 0), so that one
 * driver runs both on the same machine and prints the ratio.
 *
 *   mpirun -np 2 ./bench_mpi latency 0 1048576
 *   mpirun -np 2 ./bench_mpi vector 64 1048576 64    (block length in bytes)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void iters(long s, int small, int smallSkip, int large, int largeSkip, int *skip, int *n) {
	if (s > 8192) { *skip = largeSkip; *n = large; } else { *skip = smallSkip; *n = small; }
}

int main(int argc, char **argv) {
	int rank, size;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 4) {
		if (rank == 0) fprintf(stderr, "usage: bench_mpi latency|bw|bibw|mr|vector|allreduce|bcast|alltoall|barrier MIN MAX [BLOCK]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const char *test = argv[1];
	long lo = atol(argv[2]), hi = atol(argv[3]);
	char *buf = malloc(hi > 0 ? hi : 1);
	memset(buf, 1, hi > 0 ? hi : 1);
	int peer = 1 - rank, skip, n;
	if (!strcmp(test, "latency")) {
		for (long s = lo; s <= hi; s = s ? s * 2 : 1) {
			iters(s, 10000, 100, 1000, 10, &skip, &n);
			double t0 = 0;
			for (int i = 0; i < skip + n; i++) {
				if (i == skip) t0 = MPI_Wtime();
				if (rank == 0) {
					MPI_Send(buf, s, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
					MPI_Recv(buf, s, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				} else {
					MPI_Recv(buf, s, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
					MPI_Send(buf, s, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
				}
			}
			if (rank == 0) printf("%ld %.3f\n", s, (MPI_Wtime() - t0) * 1e6 / (2.0 * n));
		}
	} else if (!strcmp(test, "bw") || !strcmp(test, "bibw") || !strcmp(test, "mr")) {
		enum { W = 64 };
		int bi = !strcmp(test, "bibw"), rate = !strcmp(test, "mr");
		char *sbufs[W], *rbufs[W];
		MPI_Request reqs[2 * W];
		char ack[4];
		for (int j = 0; j < W; j++) {
			sbufs[j] = malloc(hi); memset(sbufs[j], 1, hi);
			rbufs[j] = malloc(hi); memset(rbufs[j], 1, hi);
		}
		for (long s = lo < 1 ? 1 : lo; s <= hi; s *= 2) {
			iters(s, 100, 10, 20, 2, &skip, &n);
			double t0 = 0;
			for (int i = 0; i < skip + n; i++) {
				if (i == skip) t0 = MPI_Wtime();
				int k = 0;
				for (int j = 0; j < W; j++)
					if (rank == 1 || bi) MPI_Irecv(rbufs[j], s, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k++]);
				for (int j = 0; j < W; j++)
					if (rank == 0 || bi) MPI_Isend(sbufs[j], s, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k++]);
				MPI_Waitall(k, reqs, MPI_STATUSES_IGNORE);
				if (rank == 0) MPI_Recv(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				else MPI_Send(ack, 4, MPI_CHAR, peer, 101, MPI_COMM_WORLD);
			}
			double secs = MPI_Wtime() - t0;
			if (rank == 0) {
				if (rate) printf("%ld %.3f\n", s, (double)n * W / secs / 1e6);
				else printf("%ld %.2f\n", s, (bi ? 2.0 : 1.0) * s * n * W / secs / 1e6);
			}
		}
	} else if (!strcmp(test, "vector")) {
		long block = argc > 4 ? atol(argv[4]) : 64;
		if (block < 8 || block % 8) {
			if (rank == 0) fprintf(stderr, "bench_mpi: block %ld: want a positive multiple of 8\n", block);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		long bl = block / 8;
		long dn = 2 * (hi / 8 > bl ? hi / 8 : bl);
		double *data = malloc(dn * 8);
		memset(data, 1, dn * 8);
		for (long s = lo < block ? block : lo; s <= hi; s *= 2) {
			MPI_Datatype v;
			MPI_Type_vector(s / block, bl, 2 * bl, MPI_DOUBLE, &v);
			MPI_Type_commit(&v);
			iters(s, 10000, 100, 1000, 10, &skip, &n);
			double t0 = 0;
			for (int i = 0; i < skip + n; i++) {
				if (i == skip) t0 = MPI_Wtime();
				if (rank == 0) {
					MPI_Send(data, 1, v, peer, 1, MPI_COMM_WORLD);
					MPI_Recv(data, 1, v, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				} else {
					MPI_Recv(data, 1, v, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
					MPI_Send(data, 1, v, peer, 1, MPI_COMM_WORLD);
				}
			}
			if (rank == 0) printf("%ld %.3f\n", s, (MPI_Wtime() - t0) * 1e6 / (2.0 * n));
			MPI_Type_free(&v);
		}
	} else if (!strcmp(test, "bcast") || !strcmp(test, "alltoall")) {
		int a2a = !strcmp(test, "alltoall");
		char *in = malloc(size * hi + 1), *out = malloc(size * hi + 1);
		memset(in, 1, size * hi + 1);
		memset(out, 1, size * hi + 1);
		for (long s = lo < 1 ? 1 : lo; s <= hi; s *= 2) {
			iters(s, 1000, 100, 100, 10, &skip, &n);
			double t0 = 0;
			for (int i = 0; i < skip + n; i++) {
				if (i == skip) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
				if (a2a) MPI_Alltoall(in, s, MPI_CHAR, out, s, MPI_CHAR, MPI_COMM_WORLD);
				else MPI_Bcast(in, s, MPI_CHAR, 0, MPI_COMM_WORLD);
			}
			double us = (MPI_Wtime() - t0) * 1e6 / n, sum;
			MPI_Allreduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
			if (rank == 0) printf("%ld %.3f\n", s, sum / size);
		}
	} else if (!strcmp(test, "allreduce")) {
		float *in = malloc((hi / 4 + 1) * 4), *out = malloc((hi / 4 + 1) * 4);
		memset(in, 1, (hi / 4 + 1) * 4);
		memset(out, 1, (hi / 4 + 1) * 4);
		for (long s = lo < 8 ? 8 : lo; s <= hi; s *= 2) {
			iters(s, 1000, 100, 100, 10, &skip, &n);
			double t0 = 0;
			for (int i = 0; i < skip + n; i++) {
				if (i == skip) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
				MPI_Allreduce(in, out, s / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			}
			double us = (MPI_Wtime() - t0) * 1e6 / n, sum;
			MPI_Allreduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
			if (rank == 0) printf("%ld %.3f\n", s, sum / size);
		}
	} else if (!strcmp(test, "barrier")) {
		double t0 = 0;
		for (int i = 0; i < 1100; i++) {
			if (i == 100) t0 = MPI_Wtime();
			MPI_Barrier(MPI_COMM_WORLD);
		}
		double us = (MPI_Wtime() - t0) * 1e6 / 1000, sum;
		MPI_Allreduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		if (rank == 0) printf("0 %.3f\n", sum / size);
	} else {
		if (rank == 0) fprintf(stderr, "bench_mpi: unknown test %s\n", test);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	MPI_Finalize();
	return 0;
}
