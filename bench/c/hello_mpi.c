/* hello_mpi: the C MPI counterpart of apps/hello, for start-up comparisons.
 * Every rank sends a greeting to its right neighbour and prints the one it
 * received from its left. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
	int rank, size;
	char out[128], in[128];
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	snprintf(out, sizeof out, "greetings from rank %d", rank);
	MPI_Sendrecv(out, sizeof out, MPI_CHAR, (rank + 1) % size, 0,
	             in, sizeof in, MPI_CHAR, (rank + size - 1) % size, 0,
	             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	printf("hello from rank %d of %d: \"%s\"\n", rank, size, in);
	MPI_Finalize();
	return 0;
}
