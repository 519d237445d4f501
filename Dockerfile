# syntax=docker/dockerfile:1
# The operator image: one static binary on distroless, running as non-root.
# Build: docker build -t ghcr.io/disruption-guard/disruption-guard:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# glibc linked statically: the binary needs nothing from the base image.
ENV RUSTFLAGS="-C target-feature=+crt-static"
RUN cargo build --release --locked --target x86_64-unknown-linux-gnu \
 && cp target/x86_64-unknown-linux-gnu/release/disruption-guard /disruption-guard

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
