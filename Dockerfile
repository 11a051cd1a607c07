# The image that `annexctl install --image` deploys: annex-agent, and
# annex-gateway and annex-fabric (the node agent) with --gateway-endpoint.
#   docker build -t annex-agent:dev .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.1.0-dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-X github.com/annexhq/annex/internal/version.Version=${VERSION}" \
      -o /out/ ./cmd/annex-agent ./cmd/annex-gateway ./cmd/annex-fabric

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/annex-agent /out/annex-gateway /out/annex-fabric /
USER 65532:65532
ENTRYPOINT ["/annex-agent"]
