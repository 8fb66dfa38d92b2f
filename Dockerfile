# dtrain's image for Kubernetes (docs/kubernetes.md): Debian 12, dtrain
# built with `make`, the examples on PATH and the Fashion-MNIST data inside.
#
#   docker build -t REGISTRY/dtrain:TAG .
#   docker push REGISTRY/dtrain:TAG
#   dtrain k8s --name mnist --image REGISTRY/dtrain:TAG -n 2 -s 2 -- \
#       mnist --kvstore dist_sync --model lenet | kubectl apply -f -
FROM debian:12-slim AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        build-essential cmake pkg-config libcmocka-dev libopenblas-dev zlib1g-dev libsodium-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# (`make all`: the library, dtrain, the examples; `make deps` is not needed here)
RUN rm -rf build && make all BUILD=build

FROM debian:12-slim
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libopenblas0-pthread libgfortran5 zlib1g libsodium23 dataset-fashion-mnist \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/dtrain /usr/local/bin/dtrain
COPY --from=build /src/build/examples/ /opt/dtrain/examples/
ENV PATH=/opt/dtrain/examples:$PATH
# The BLAS kernel decides the bits of every product: pin it when the nodes'
# processors differ, so that every pod computes alike (docs/launcher.md,
# "Placement and exact results"), e.g.  ENV OPENBLAS_CORETYPE=Haswell
# Every pod runs as this user; nothing needs root.
RUN useradd --create-home --uid 10001 dtrain
USER 10001
WORKDIR /home/dtrain
