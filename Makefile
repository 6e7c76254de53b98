# nvmet-rebind — build, test, demo, install.
GO      ?= go
PREFIX  ?= /usr/local
DESTDIR ?=
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build test unit demo bench lint clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/nvmet-rebind ./cmd/nvmet-rebind

# Every test: unit tests, then the real-kernel end-to-end tests in qemu
# (Debian 6.1 and 6.12 kernels; they install what they need with apt-get
# when run as root, and skip with the reason otherwise).
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 85m ./...

# Unit tests only (no VM).
unit:
	$(GO) test -count=1 -short ./...

# Boots the real kernel and shows a device reset being healed.
demo:
	$(GO) test -count=1 -timeout 30m -run '^TestDemo$$' -v ./tests/

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin tests/artifacts
