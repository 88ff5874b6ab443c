# How MPI integration tests start ranks on small machines (see ../shared/TESTBED.md): 4 ranks on
# 2 cores need --oversubscribe, --bind-to none and yielding, or busy-polling ranks starve.
# Open MPI refuses root unless told, hence the environment set on every MPI test.
set(SAX_MPIEXEC_FLAGS --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
set(SAX_MPI_ROOT_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
