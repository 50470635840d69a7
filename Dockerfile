# Container image for edihub: a static binary on a distroless base, running
# as an unprivileged user. Build: docker build -t edihub:dev .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.buildVersion=${VERSION}" -o /out/edihub ./cmd/edihub

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/edihub /usr/local/bin/edihub
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/edihub"]
CMD ["serve"]
