# dtrain's two commands (README): `make demo` runs the main job, `make test`
# runs the whole test suite. Both install missing Debian packages when run
# as root. `make` alone builds into build/.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
# The threaded parts: the transport, the KVStore, the collectives, bootstrap.
TSAN_TESTS ?= shm_ring_test|shm_test|integration_transport|obs_test|integration_observability|van_test|coll_test|integration_kv_matrix|integration_kv_compression|integration_coll_compression|integration_cluster_manual|integration_coll_ranks|integration_heartbeat|integration_resend|integration_checkpoint|integration_recovery|integration_kv_rows|ckpt_test|integration_coll_wait|integration_coll_hier$$|integration_elastic_shrink|integration_elastic_grow$$|integration_elastic_sync|integration_lazy_links
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
DEPS        = build-essential cmake pkg-config libcmocka-dev libopenblas-dev \
              zlib1g-dev libsodium-dev openssh-client openmpi-bin libopenmpi-dev dataset-fashion-mnist \
              python3 python3-yaml procps librsvg2-bin \
              openssh-server rsync iproute2 slurm-wlm munge
# (the last line: the real engines the launcher's tests start privately:
# sshd on namespace hosts, rsync, a Slurm cluster with munge)
# The Python binding (python/): its headers, and what its tests and
# examples import.
DEPS       += python3-dev python3-numpy python3-pytest python3-torch
DATA       ?= /usr/share/datasets/fashion-mnist

.PHONY: all deps test test-fast test-asan test-tsan demo hello bench clean format
.PHONY: install uninstall deb apps

all:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

# Install what is missing (Debian 12), only when we can (root).
deps:
	@missing=""; for p in $(DEPS); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "missing Debian packages:$$missing (run as root to install)"; \
	  fi; \
	fi

# The whole suite: the normal build, then again under ASan+UBSan, then the
# threaded parts under TSan; each pass says how long it took (its build
# included), failed or not.
TIMED = s=$$(date +%s); st=0; $(1) || st=$$?; \
	echo "make test: $(2) took $$(($$(date +%s) - s)) s$$([ $$st = 0 ] || echo ', FAILED')"; \
	exit $$st
# OpenBLAS older than its processor runs generic kernels, several times
# slower (docs/training.md): every process a target starts gets the
# OPENBLAS_CORETYPE that `dtrain env --blas-core` names, unless it is set.
BLAS_ENV = core=$$($(1)/dtrain env --blas-core 2>/dev/null); \
	[ -z "$$core" ] || { export OPENBLAS_CORETYPE=$$core; \
	echo "(OpenBLAS does not know this processor: OPENBLAS_CORETYPE=$$core)"; };
test: deps all
	@$(call TIMED,($(call BLAS_ENV,$(BUILD)) cd $(BUILD) && ctest --output-on-failure -j$(JOBS)),the normal pass)
	@$(call TIMED,$(MAKE) --no-print-directory test-asan,the ASan+UBSan pass)
	@$(call TIMED,$(MAKE) --no-print-directory test-tsan,the TSan pass)

test-fast: all
	@$(call BLAS_ENV,$(BUILD)) cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# (the sanitizer passes leave out the tests labelled timing: they measure
# wall-clock behaviour of code that the other tests run under the
# sanitizers too; see tests/CMakeLists.txt)
test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
	  -DDT_SANITIZE=address,undefined
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	@$(call BLAS_ENV,$(ASAN_BUILD)) cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j$(JOBS) -LE timing

test-tsan:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDT_SANITIZE=thread
	cmake --build $(TSAN_BUILD) -j$(JOBS)
	@$(call BLAS_ENV,$(TSAN_BUILD)) cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure -j$(JOBS) -LE timing -R '$(TSAN_TESTS)'

# The main job: a local cluster (scheduler, 2 servers, 2 workers) training
# LeNet for one epoch (under a minute with the build on a 2-core machine;
# mnist's default is 3 epochs). Only the library, the command and
# the examples are built, quietly: one line a stage, the compiler's output
# in $(BUILD)/demo-build.log.
demo: deps apps
	@echo "[demo] train (dtrain launch -n 2 -s 2)"
	@$(call BLAS_ENV,$(BUILD)) \
	if [ -x $(BUILD)/examples/mnist ] && [ -d $(DATA) ]; then \
	  $(BUILD)/dtrain launch -n 2 -s 2 --launcher local \
	    --timeline $(BUILD)/demo_timeline.json -- \
	    $(BUILD)/examples/mnist --model lenet --kvstore dist_sync \
	    --epochs 1 \
	    --data $(DATA) --metrics $(BUILD)/demo_metrics.jsonl && \
	  echo "metrics log: $(BUILD)/demo_metrics.jsonl (one JSON object a line)" && \
	  echo "plot it:     $(BUILD)/dtrain plot $(BUILD)/demo_metrics.jsonl -o curves.svg" && \
	  echo "timeline:    $(BUILD)/demo_timeline.json (open it in https://ui.perfetto.dev)"; \
	else \
	  PS_VERBOSE=1 $(BUILD)/dtrain launch -n 2 -s 2 --launcher local -- \
	    $(BUILD)/examples/hello_cluster; \
	fi

# The library, `dtrain` and the examples only (no tests, benchmarks or
# fuzz targets), one line a stage.
apps:
	@mkdir -p $(BUILD)
	@echo "[build] configure (log: $(BUILD)/demo-build.log)"
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  >$(BUILD)/demo-build.log 2>&1 || \
	  { tail -n 30 $(BUILD)/demo-build.log; exit 1; }
	@echo "[build] compile the library, dtrain and the examples"
	@cmake --build $(BUILD) -j$(JOBS) --target dt_apps \
	  >>$(BUILD)/demo-build.log 2>&1 || \
	  { tail -n 30 $(BUILD)/demo-build.log; exit 1; }

# Install under $(PREFIX) (default /usr/local), staged under $(DESTDIR) when
# set (docs/getting-started.md lists what goes where). `make uninstall` removes what
# the last install wrote, from $(BUILD)/install_manifest.txt.
PREFIX     ?= /usr/local
install: all
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

uninstall:
	@test -f $(BUILD)/install_manifest.txt || \
	  { echo "uninstall: $(BUILD)/install_manifest.txt is missing (nothing installed from $(BUILD))"; exit 1; }
	@n=$$(grep -c . $(BUILD)/install_manifest.txt); \
	sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt | xargs -d '\n' rm -f -- && \
	sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt | xargs -d '\n' -n1 dirname | sort -ru | \
	  grep '/dtrain\(/\|$$\)' | xargs -r -d '\n' rmdir --ignore-fail-on-non-empty --; \
	echo "uninstall: removed $$n files"

# A Debian package of the tree: dtrain_<version>_<arch>.deb in the top
# directory (tools/mkdeb.sh; docs/getting-started.md).
deb:
	bash tools/mkdeb.sh

hello: all
	PS_VERBOSE=1 $(BUILD)/dtrain launch -n 2 -s 2 --launcher local -- \
	  $(BUILD)/examples/hello_cluster

bench: deps all
	bash bench/run_all.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-deb
