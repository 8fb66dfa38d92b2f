# blas_env.bash - sourced by the tests that compare trainings of different
# batch shapes (mnist_parity.sh, kv_compression.sh, kv_placement.sh).
#
# OpenBLAS picks its kernels from the processor's model. Where it does not
# know the model (a newer processor than its release, or a virtual machine
# that hides it), Debian's OpenBLAS 0.3.21 runs its generic Prescott (SSE3)
# kernels. On such a machine LeNet trained at batch 64 with those kernels
# ended 0.04 away (max_abs) from the same training summed from batches of
# 16 and 32, while with the Haswell or SkylakeX kernels every shape agreed
# to 4e-7; the compressed runs' accuracy moved by as much. So these tests
# take the kernels `dtrain env --blas-core` names, as a user of such a
# machine should for speed too (docs/training.md). A setting already made
# (`make test` makes it) is left alone.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x "$DTRAIN_BUILD/dtrain" ]; then
	_blas_core=$("$DTRAIN_BUILD/dtrain" env --blas-core)
	if [ -n "$_blas_core" ]; then
		echo "note: OpenBLAS does not know this processor: OPENBLAS_CORETYPE=$_blas_core for this test"
		export OPENBLAS_CORETYPE=$_blas_core
	fi
fi
