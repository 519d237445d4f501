# syntax=docker/dockerfile:1
# The operator image: one static binary on distroless, running as non-root, for linux/amd64 and
# linux/arm64. The build stage runs on the builder's own platform and cross-compiles for the
# target's, so no emulation is needed.
# Build: docker build -t ghcr.io/disruption-guard/disruption-guard:0.1.0 .
# Both architectures: docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/disruption-guard/disruption-guard:0.1.0 .
# The binaries alone: docker buildx build --platform linux/amd64,linux/arm64 --target binaries --output type=local,dest=dist .

FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS build
ARG BUILDARCH
ARG TARGETARCH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Each platform's Rust target, and the C cross toolchain (linker and static glibc) when the
# builder's architecture differs. The packages come from the base image's Debian release.
# hadolint ignore=DL3008
RUN case "$TARGETARCH" in \
      amd64) target=x86_64-unknown-linux-gnu cross=(gcc-x86-64-linux-gnu libc6-dev-amd64-cross) ;; \
      arm64) target=aarch64-unknown-linux-gnu cross=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross) ;; \
      *) echo "unsupported TARGETARCH $TARGETARCH (amd64 or arm64)" >&2; exit 1 ;; \
    esac \
 && if [ "$TARGETARCH" != "$BUILDARCH" ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends "${cross[@]}" \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && rustup target add "$target" \
 && echo "$target" > /rust-target
# The Debian name of each target's C compiler (native or cross), for cargo's linker and for the
# C parts of dependencies (ring, psm).
ENV CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=x86_64-linux-gnu-gcc \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_x86_64_unknown_linux_gnu=x86_64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# glibc linked statically: the binary needs nothing from the base image.
ENV RUSTFLAGS="-C target-feature=+crt-static"
RUN cargo build --release --locked --target "$(cat /rust-target)" \
 && cp "target/$(cat /rust-target)/release/disruption-guard" /disruption-guard

# The release's binaries: --target binaries --output type=local writes one per platform.
FROM scratch AS binaries
COPY --from=build /disruption-guard /disruption-guard

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="disruption-guard" \
      org.opencontainers.image.description="Keeps node autoscalers from killing lone-replica pods while CI tests run" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/disruption-guard/disruption-guard"
COPY --from=build /disruption-guard /usr/local/bin/disruption-guard
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/disruption-guard"]
CMD ["operator"]
