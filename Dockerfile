# Container image for edihub, for those who build with Docker. It is the
# image `make image` builds without a container runtime (cmd/edihub-image):
# the static binary, Debian's CA certificates and an unprivileged user
# (65532) on an empty base, entrypoint edihub, command serve.
#
#   docker build --build-arg VERSION=v1.2.3 -t edihub:v1.2.3 .
#   docker build --build-arg BORING=1 ...   # with BoringCrypto (make image BORING=1)
#
# The build base is pinned to a Go patch release on Debian 12; pin it by
# digest in your pipeline (docker buildx imagetools inspect golang:<tag>)
# where policy requires it. The final base is scratch: nothing else is
# pulled.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
ARG VERSION=dev
ARG BORING=
RUN if [ "$BORING" = 1 ]; then \
      GOEXPERIMENT=boringcrypto CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo \
        -ldflags "-s -w -X main.buildVersion=${VERSION} -linkmode external -extldflags -static" -o /out/usr/local/bin/edihub ./cmd/edihub; \
    else \
      CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.buildVersion=${VERSION}" -o /out/usr/local/bin/edihub ./cmd/edihub; \
    fi
RUN mkdir -p /out/etc/ssl/certs /out/home/nonroot /out/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /out/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /out/etc/group \
 && chown 65532:65532 /out/home/nonroot && chmod 0700 /out/home/nonroot && chmod 1777 /out/tmp

FROM scratch
ARG VERSION=dev
COPY --from=build /out/ /
COPY --from=build --chown=65532:65532 /out/home/nonroot /home/nonroot
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
EXPOSE 8080 9090
LABEL org.opencontainers.image.title=edihub \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.source=https://github.com/edihub/edihub
ENTRYPOINT ["/usr/local/bin/edihub"]
CMD ["serve"]
