# blas_env.bash - sourced by the tests that compare trainings of different
# batch shapes (mnist_parity.sh, kv_compression.sh).
#
# OpenBLAS picks its kernels from the processor's model. Where it does not
# know the model (a virtual machine that hides it: "Intel Xeon Processor"),
# Debian's OpenBLAS 0.3.21 runs its generic Prescott (SSE3) kernels. On
# such a machine LeNet trained at batch 64 with those kernels ended 0.04
# away (max_abs) from the same training summed from batches of 16 and 32,
# while with the Haswell or SkylakeX kernels every shape agreed to 4e-7;
# the compressed runs' accuracy moved by as much. So where OpenBLAS would
# fall back although the processor has AVX2, these tests ask for the
# Haswell kernels, as a user of such a machine should for speed too
# (docs/training.md). A setting already made is left alone.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x "$DTRAIN_BUILD/tests/progs/blas_core" ]; then
	read -r _blas_core _blas_isa < <("$DTRAIN_BUILD/tests/progs/blas_core")
	case "$_blas_core" in
	Prescott | Core2 | Penryn | Dunnington | Nehalem | Atom | Katmai | Coppermine | Northwood | Banias)
		if [ "$_blas_isa" != none ]; then
			echo "note: OpenBLAS chose its $_blas_core kernels on a processor with ${_blas_isa^^}: OPENBLAS_CORETYPE=Haswell for this test"
			export OPENBLAS_CORETYPE=Haswell
		fi
		;;
	esac
fi
