# The underlay binary on an empty image, for users with a registry.
#
# To turn it into a managed plugin (the same rootfs `make plugin` builds
# without docker build):
#
#   docker build -t underlay-rootfs .
#   id=$(docker create underlay-rootfs)
#   mkdir -p build/rootfs
#   docker export "$id" | tar -x -C build/rootfs
#   docker rm "$id"
#   cp config.json build/
#   docker plugin create REGISTRY/underlay:TAG build
#   docker plugin push REGISTRY/underlay:TAG
#
# Users then run `docker plugin install --grant-all-permissions
# REGISTRY/underlay:TAG --alias underlay`.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /underlay ./cmd/underlay

FROM scratch
COPY --from=build /underlay /underlay
ENTRYPOINT ["/underlay", "serve"]
