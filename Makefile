# nvmet-rebind — build, test, demo, install.
GO      ?= go
PREFIX  ?= /usr/local
DESTDIR ?=
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build test test-all unit demo bench lint clean install packages

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/nvmet-rebind ./cmd/nvmet-rebind

# Every test: vet, staticcheck, unit tests under the race detector, then all
# tests again including the real-kernel end-to-end tests in qemu (Debian's
# 6.1, 6.12 and newest kernels: every scenario on 6.12 and the newest (the
# scale layouts on the newest alone), a representative set on 6.1; the
# systemd test on Debian 12 and
# 13 images, each on its own kernel — tests/README.md. They install what they need with apt-get
# when run as root, and skip with the reason otherwise).
test:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) test -race -short -count=1 ./...
	$(GO) test -count=1 -timeout 85m ./...

# make test, with the 6.18 LTS too, every scenario on every kernel and the
# systemd test of every image (Debian testing's too) on every kernel and
# its own (NVMET_REBIND_E2E_ALL=1). About twice as long.
test-all:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) test -race -short -count=1 ./...
	NVMET_REBIND_E2E_ALL=1 $(GO) test -count=1 -timeout 180m ./...

# Unit tests only (no VM).
unit:
	$(GO) test -count=1 -short ./...

# Boots the real kernel and shows a device reset being healed.
demo:
	$(GO) test -count=1 -timeout 30m -run '^TestDemo$$' -v ./tests/

# Every figure of BENCHMARKS.md: Go benchmarks (fake kernel on tmpfs: the
# full reads against the inotify model), the real-kernel re-listen latency
# over 20 resets on both kernels next to a scripted relink, the scale
# scenarios (256 ports + 32 portals, 256 sharers, one port of 1,000
# subsystems: daemon against a script; boot completion of saved configs of
# 64 subsystems x 8 ports and of 1,000 subsystems x 2 ports),
# the trigger latency, and the idle cost over 10 minutes with 4,096 ports
# and 4,096 portals, model and --no-watch. About an hour.
bench:
	$(GO) test -run '^$$' -bench 'ObservePlan|ReconcileOnePercentDead|SharedPortalHeal|ManySubsystemsHeal' -benchmem -benchtime 10x ./rebind/
	$(GO) test -run '^$$' -bench 'EventToFirstWrite' -benchtime 100x -benchmem -timeout 60m ./rebind/
	TMPDIR=/var/tmp $(GO) test -run '^$$' -bench 'PutAll' -benchtime 20x -count 3 ./rebind/state/
	$(GO) test -run '^$$' -bench 'EventBurst' -benchtime 10000x ./rebind/
	$(GO) test -run '^$$' -bench 'ModelRead|FullRead|Rescan|Rebuild' -benchmem -benchtime 10x ./configfs/watch/
	$(GO) test -run '^$$' -bench 'DropChildren|PortLinks|SharerZeros' -benchtime 50x -count 4 -cpu 1 ./configfs/watch/
	$(GO) test -run '^$$' -bench . -benchmem ./rebind/rdma/
	NVMET_REBIND_E2E_BENCH=20 NVMET_REBIND_E2E_SCENARIOS='^bench$$' $(GO) test -count=1 -timeout 60m -run '^TestE2E$$' -v ./tests/
	NVMET_REBIND_E2E_BENCH=1 NVMET_REBIND_E2E_VERBOSE=1 NVMET_REBIND_E2E_KERNELS='6.12 newest' NVMET_REBIND_E2E_SCENARIOS='^(nvmet-scale|shared-iser-scale|nvmet-subsys-scale|boot-complete-scale)$$' $(GO) test -count=1 -timeout 60m -run '^TestE2E$$' -v ./tests/
	tests/trigger-latency.sh 100
	tests/idle-cost.sh 600 4096 4096 model
	tests/idle-cost.sh 600 4096 4096 full

clean:
	rm -rf bin tests/artifacts dist

# make install [PREFIX=/usr/local] [DESTDIR=] [SYSTEMD_VERSION=]: binary,
# unit, udev rule, reference config (kept when present), man page, bash and
# zsh completion, and the systemd < 253 drop-in
# (/etc/systemd/system/nvmet-rebind.service.d/systemd-252.conf) unless the
# TARGET's systemd is known to be 253 or newer. That version is
# SYSTEMD_VERSION when given; else, without DESTDIR (installing onto this
# host), `systemctl --version` here; with DESTDIR (a root for another host)
# the build host is never asked: the version is unknown and the drop-in is
# installed, since it works on every systemd (only unneeded on 253+). So for
# a 253+ target: make install DESTDIR=... SYSTEMD_VERSION=257.
SYSTEMD_VERSION ?=

install: build
	install -D -m 0755 bin/nvmet-rebind $(DESTDIR)$(PREFIX)/sbin/nvmet-rebind
	install -d -m 0755 $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed 's|/usr/local/sbin/|$(PREFIX)/sbin/|g' etc/systemd/nvmet-rebind.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/nvmet-rebind.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/nvmet-rebind.service
	sed 's|/usr/local/sbin/|$(PREFIX)/sbin/|g' etc/systemd/nvmet-rebind-trigger@.service > '$(DESTDIR)$(PREFIX)/lib/systemd/system/nvmet-rebind-trigger@.service'
	chmod 0644 '$(DESTDIR)$(PREFIX)/lib/systemd/system/nvmet-rebind-trigger@.service'
	v='$(SYSTEMD_VERSION)'; \
	if [ -z "$$v" ] && [ -z '$(DESTDIR)' ]; then \
		v=$$(systemctl --version 2>/dev/null | awk 'NR == 1 && $$2 ~ /^[0-9]+$$/ { print $$2 }'); \
	fi; \
	case $$v in *[!0-9]*) echo "make install: SYSTEMD_VERSION=$$v is not a number (systemctl --version's, e.g. 252)" >&2; exit 1;; esac; \
	if [ -z "$$v" ] || [ "$$v" -lt 253 ]; then \
		install -d -m 0755 $(DESTDIR)/etc/systemd/system/nvmet-rebind.service.d; \
		sed 's|/usr/local/sbin/|$(PREFIX)/sbin/|g' etc/systemd/nvmet-rebind.service.d/systemd-252.conf > $(DESTDIR)/etc/systemd/system/nvmet-rebind.service.d/systemd-252.conf; \
		chmod 0644 $(DESTDIR)/etc/systemd/system/nvmet-rebind.service.d/systemd-252.conf; \
	fi
	install -d -m 0755 $(DESTDIR)/etc/udev/rules.d
	sed 's|/usr/local/sbin/|$(PREFIX)/sbin/|g' etc/udev/rules.d/90-nvmet-rebind.rules > $(DESTDIR)/etc/udev/rules.d/90-nvmet-rebind.rules
	install -d -m 0755 $(DESTDIR)/etc/nvmet-rebind
	[ -e $(DESTDIR)/etc/nvmet-rebind/config.toml ] || install -m 0600 etc/nvmet-rebind/config.toml $(DESTDIR)/etc/nvmet-rebind/config.toml
	install -D -m 0644 etc/man/nvmet-rebind.8 $(DESTDIR)$(PREFIX)/share/man/man8/nvmet-rebind.8
	install -D -m 0644 etc/completion/nvmet-rebind.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/nvmet-rebind
	install -D -m 0644 etc/completion/_nvmet-rebind $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_nvmet-rebind

# make packages [DIST=dist] [PKG_ARCH=amd64]: the .deb and the .rpm in
# $(DIST)/, built by nfpm (etc/packaging/nfpm.yaml; etc/packaging/README.md
# explains the layout and the maintainer scripts). The version comes from
# `git describe` (etc/packaging/version.sh); file times are the commit's.
# The binary is a position-independent executable (ASLR; lintian flags a
# static non-PIE one), with no shared library. The .deb's control has no
# License: field (nfpm would write one; dpkg knows none), the .rpm's has.
DIST           ?= dist
NFPM           ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.0
PKG_ARCH       ?= $(shell $(GO) env GOARCH)
PKG_MAINTAINER ?= nvmet-rebind maintainers <maintainers@users.noreply.a-seed-694f2dba.example>

packages:
	@set -e; \
	version=$$(PKG_VERSION='$(PKG_VERSION)' etc/packaging/version.sh); \
	rpmversion=$$(PKG_VERSION='$(PKG_VERSION)' etc/packaging/version.sh --rpm); \
	epoch=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || date +%s)}; \
	date=$$(date -u -R -d @$$epoch); \
	build=$(abspath $(DIST))/build; \
	rm -rf "$$build"; mkdir -p "$$build"; \
	echo "packages: nvmet-rebind $$version (rpm: $${rpmversion% *}-$${rpmversion#* }) $(PKG_ARCH) in $(DIST)/"; \
	CGO_ENABLED=0 GOOS=linux GOARCH=$(PKG_ARCH) $(GO) build -trimpath -buildmode=pie -ldflags '$(LDFLAGS) -s -w -bindnow' -o "$$build/nvmet-rebind" ./cmd/nvmet-rebind; \
	sed 's|/usr/local/sbin/|/usr/sbin/|g' etc/systemd/nvmet-rebind.service > "$$build/nvmet-rebind.service"; \
	sed 's|/usr/local/sbin/|/usr/sbin/|g' etc/systemd/nvmet-rebind-trigger@.service > "$$build/nvmet-rebind-trigger@.service"; \
	sed 's|/usr/local/sbin/|/usr/sbin/|g' etc/systemd/nvmet-rebind.service.d/systemd-252.conf > "$$build/systemd-252.conf"; \
	sed 's|/usr/local/sbin/|/usr/sbin/|g' etc/udev/rules.d/90-nvmet-rebind.rules > "$$build/90-nvmet-rebind.rules"; \
	gzip -9n < etc/man/nvmet-rebind.8 > "$$build/nvmet-rebind.8.gz"; \
	printf '%s\n' "nvmet-rebind ($$version) unstable; urgency=medium" "" \
		"  * Built by make packages from git $$(git describe --tags --always --dirty 2>/dev/null || echo "$$version")." \
		"    The changes are the project's git history." "" \
		" -- $(PKG_MAINTAINER)  $$date" | gzip -9n > "$$build/changelog.gz"; \
	sed '/^license:/d' etc/packaging/nfpm.yaml > "$$build/nfpm-deb.yaml"; \
	PKG_BUILD="$$build" PKG_ARCH=$(PKG_ARCH) PKG_VERSION="$$version" PKG_RELEASE= PKG_MAINTAINER='$(PKG_MAINTAINER)' \
		SOURCE_DATE_EPOCH=$$epoch $(NFPM) package -f "$$build/nfpm-deb.yaml" -p deb -t $(DIST)/; \
	PKG_BUILD="$$build" PKG_ARCH=$(PKG_ARCH) PKG_VERSION="$${rpmversion% *}" PKG_RELEASE="$${rpmversion#* }" PKG_MAINTAINER='$(PKG_MAINTAINER)' \
		SOURCE_DATE_EPOCH=$$epoch $(NFPM) package -f etc/packaging/nfpm.yaml -p rpm -t $(DIST)/
