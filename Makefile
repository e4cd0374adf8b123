# m2ho build, test and run targets. `sudo make demo` and `sudo make test`
# work on a fresh Debian/Ubuntu machine: missing tools are installed first.

SHELL := /bin/bash

# find_go prints the first go command of at least Go 1.21, the first that
# fetches the toolchain go.mod names by itself. Besides PATH it looks where
# Go is usually installed, since sudo's secure_path drops those directories:
# the go.dev tarball, Debian's golang-go and versioned golang-1.NN-go
# packages (newest first), and the Go trees of root and the calling user.
# GOTOOLCHAIN=local makes each candidate report its own version.
GO_DIRS := /usr/local/go/bin /usr/lib/go/bin
find_go = for g in $$(command -v go) $(addsuffix /go,$(GO_DIRS)) $$(ls -d /usr/lib/go-1.*/bin/go 2>/dev/null | sort -rV) \
		$$HOME/go/bin/go /root/go/bin/go $$(ls -d $$HOME/sdk/go*/bin/go /root/sdk/go*/bin/go 2>/dev/null | sort -rV); do \
		v=$$(GOTOOLCHAIN=local "$$g" version 2>/dev/null | sed -n 's/^go version go1\.\([0-9]*\).*/\1/p'); \
		if [ "$${v:-0}" -ge 21 ]; then echo "$$g"; break; fi; \
	done
# GO is looked up at each use, so that a Go installed by deps is used by
# the targets that run after it in the same make.
GO ?= $(or $(shell $(find_go)),go)
# auto lets an older go (Debian's golang-go or golang-1.NN-go) fetch the
# toolchain of go.mod's go line through the Go module proxy, even where
# `go env -w` or a distribution's go.env chose local. A GOTOOLCHAIN set in
# the environment still wins.
GOTOOLCHAIN ?= auto
GOFLAGS ?=
export GOFLAGS GOTOOLCHAIN

# Pinned BPF compiler settings; bpf2go output is committed and CI checks
# that regenerating it changes nothing, so these must not drift.
BPF_CLANG ?= clang
# The multiarch include directory provides <asm/...> for the uapi headers
# (Debian/Ubuntu layout: /usr/include/x86_64-linux-gnu, aarch64-linux-gnu).
BPF_CFLAGS := -O2 -g -Wall -Werror -mcpu=v3 -fno-ident -I/usr/include/$(shell uname -m)-linux-gnu
export BPF_CLANG BPF_CFLAGS

BIN := bin

# The build's identity (m2hod --version, m2hod_build_info), from git: a
# release tag, or git describe's form between releases. Outside a git
# checkout the binary falls back on what the Go toolchain embedded.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_PKG := github.com/m2ho/m2ho/pkg/version
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)
# Test-only Python environment with the pycrate RRC oracle.
VENV := .venv
# Test-only Python environment with the GSMTAP clients (SCAT, QCSuper).
GSMTAP_VENV := .venv-gsmtap
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
APT_PACKAGES := clang llvm libbpf-dev iproute2 ethtool tcpdump nftables python3
# Commands that prove each package is present (same order as above).
APT_PROBES := clang llvm-strip /usr/include/bpf/bpf_helpers.h ip ethtool tcpdump nft python3

.PHONY: all deps build generate test test-unit bench fuzz lint demo eval eval-quick fidelity-paper clean install uninstall dist

all: build

# go_package prints the apt package that brings the newest Go of at least
# 1.21: golang-go when it is recent enough, else a versioned golang-1.NN-go
# (Debian bookworm has them in backports only, Ubuntu in its updates).
go_package = for p in golang-go $$(apt-cache pkgnames golang-1. 2>/dev/null | grep -E '^golang-1\.[0-9]+-go$$' | sort -rV); do \
		v=$$(apt-cache policy $$p 2>/dev/null | sed -n 's/^ *Candidate: \([0-9]*:\)\{0,1\}1\.\([0-9]*\).*/\2/p'); \
		if [ "$${v:-0}" -ge 21 ]; then echo $$p; break; fi; \
	done

# deps installs what the build and the tests need when it is missing.
deps:
	@go=$$($(find_go)); \
	if [ -z "$$go" ]; then \
		if ! command -v apt-get >/dev/null; then echo "missing: go 1.21 or newer (install it from https://go.dev/dl; no apt-get here)"; exit 1; fi; \
		if [ "$$(id -u)" -ne 0 ]; then echo "run as root (sudo make ...) to install: go"; exit 1; fi; \
		apt-get update -qq; pkg=$$($(go_package)); \
		if [ -z "$$pkg" ] && . /etc/os-release && [ "$$ID" = debian ] && [ -n "$$VERSION_CODENAME" ] && \
			! grep -rqs "$$VERSION_CODENAME-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then \
			echo "enabling $$VERSION_CODENAME-backports for a recent Go"; \
			echo "deb http://deb.debian.org/debian $$VERSION_CODENAME-backports main" > /etc/apt/sources.list.d/$$VERSION_CODENAME-backports.list; \
			apt-get update -qq; pkg=$$($(go_package)); \
		fi; \
		if [ -n "$$pkg" ]; then \
			echo "installing: $$pkg"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$pkg >/dev/null; \
		fi; \
		go=$$($(find_go)); \
		if [ -z "$$go" ]; then echo "missing: go 1.21 or newer, not in PATH, $(GO_DIRS), /usr/lib/go-1.*/bin or ~/go/bin, and apt has none (install it from https://go.dev/dl)"; exit 1; fi; \
	fi; \
	if ! out=$$("$$go" version 2>&1); then \
		echo "$$go cannot get the Go toolchain go.mod asks for (GOTOOLCHAIN=$$GOTOOLCHAIN, through the Go module proxy): $$(echo "$$out" | tail -n 1)"; exit 1; \
	fi
	@missing=""; set -- $(APT_PACKAGES); for probe in $(APT_PROBES); do \
		pkg=$$1; shift; \
		if [[ $$probe == /* ]]; then [ -e $$probe ] || missing="$$missing $$pkg"; \
		else command -v $$probe >/dev/null 2>&1 || missing="$$missing $$pkg"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
		if ! command -v apt-get >/dev/null; then echo "missing:$$missing (install them; no apt-get here)"; exit 1; fi; \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" -ne 0 ]; then echo "run as root (sudo make ...) to install:$$missing"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@python3 -c 'import ensurepip, venv' 2>/dev/null || { \
		echo "installing: python3-venv"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; }

# The RRC differential tests compare the Go decoder with pycrate.
$(VENV)/.installed: tools/rrc-oracle/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -r tools/rrc-oracle/requirements.txt
	touch $@

# The GSMTAP client tests replay captures through SCAT and QCSuper.
$(GSMTAP_VENV)/.installed: tools/gsmtap-clients/requirements.txt
	python3 -m venv $(GSMTAP_VENV)
	$(GSMTAP_VENV)/bin/pip install -q -r tools/gsmtap-clients/requirements.txt
	touch $@

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/... ./test/cmd/...

# GENERATED are the packages whose BPF objects bpf2go generates.
GENERATED := ./pkg/datapath/... ./test/scaledcc/...
generate: deps
	$(GO) generate $(GENERATED)

# Tests come in tiers: beside the code, pure Go tests and the tests that
# need the kernel for the code itself, such as pkg/datapath's BPF_PROG_RUN
# packet fixtures and its attach tests, which need a real link (a veth pair
# between namespaces); end-to-end tests with real kernel TCP, the
# datapath's in test/e2e/datapath and the daemon's in test/e2e; and
# benchmarks. test runs all but the benchmarks (as root, which the
# fixtures and namespaces need); test-unit only what needs nothing but Go:
# with -short, nstest.RequireRoot skips the rest, even as root.
test: deps build $(VENV)/.installed $(GSMTAP_VENV)/.installed
	$(GO) test -p 1 -count=1 -timeout 20m ./...

test-unit:
	$(GO) test -short -p 1 -count=1 -timeout 10m ./...

# bench prints the benchmarks' figures. Those that need root (BPF programs,
# namespaces, the daemon) are built only with the bench tag; the TestBench
# tests first check what they rest on.
bench: deps
	$(GO) test -tags bench -p 1 -count=1 -run '^TestBench' -bench . -benchmem -timeout 30m ./...

# fuzz runs every fuzz target of the tree for FUZZTIME each, one at a time.
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -parallel 1 $$pkg || exit 1; \
		done; \
	done

lint:
	@out=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go')) || exit 1; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags bench ./...
	$(GO) run $(STATICCHECK) -tags bench ./...

demo: deps build
	$(BIN)/m2ho-testbed demo --out out/demo --scenario test/scenarios/demo.yaml --m2hod $(BIN)/m2hod

# eval runs the section 6 evaluation (docs/results.md): CUBIC scaled like
# the testbed with and without m2ho over walking and driving corpora of at
# least 140 handovers each on the shared Lumos5G traces, and the baselines
# and ablations on one scenario of each, two units at a time (about two
# hours on two cores); run it again to resume. EVAL_OUT keeps the per-run
# results, small enough for the repository, so a run stopped on one
# machine resumes on another.
EVAL_OUT ?= docs/results/eval
eval: deps build
	$(BIN)/m2ho-testbed eval --out $(EVAL_OUT) --m2hod $(BIN)/m2hod --parallel 2

# eval-quick is the day-to-day check: the headline pair only, on at least
# twelve handovers of each mobility pattern (four scenarios, two units at
# a time: about 10 minutes), with intervals.
eval-quick: deps build
	$(BIN)/m2ho-testbed eval --out out/eval-quick --m2hod $(BIN)/m2hod --handovers 12 --extra-variants '' --parallel 2

# fidelity-paper holds plain CUBIC, kernel and scaled, to the paper's
# section 3 (docs/testbed.md); with FIDELITY_FROM it reads an evaluation's
# runs instead of running its own corpus.
fidelity-paper: deps build
	$(BIN)/m2ho-testbed fidelity --paper --out out/fidelity-paper $(if $(FIDELITY_FROM),--from $(FIDELITY_FROM))

# install puts m2hod where a service manager finds it: the binary in
# $(PREFIX)/bin, the unit (its ExecStart pointing there) in the systemd
# system unit directory, the example configuration as $(SYSCONFDIR)/m2ho/
# m2hod.yaml unless one is there, and the dashboard and alert rules in
# $(PREFIX)/share/m2ho. DESTDIR stages it all under another root.
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/systemd/system,$(SYSCONFDIR)/systemd/system)
SHAREDIR = $(PREFIX)/share/m2ho
INSTALLED_FILES = $(PREFIX)/bin/m2hod $(UNITDIR)/m2hod.service $(SHAREDIR)/grafana-dashboard.json \
	$(SHAREDIR)/m2hod-alerts.yml $(SHAREDIR)/m2hod.yaml.example

install: $(if $(M2HOD_BIN),,build)
	install -D -m 0755 $(or $(M2HOD_BIN),$(BIN)/m2hod) $(DESTDIR)$(PREFIX)/bin/m2hod
	install -d -m 0755 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SHAREDIR)
	sed -e 's|/usr/local/bin/m2hod|$(PREFIX)/bin/m2hod|g' -e 's|/etc/m2ho/|$(SYSCONFDIR)/m2ho/|g' \
		deploy/m2hod.service > $(DESTDIR)$(UNITDIR)/m2hod.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/m2hod.service
	install -m 0644 deploy/grafana-dashboard.json deploy/m2hod-alerts.yml $(DESTDIR)$(SHAREDIR)/
	install -m 0644 deploy/m2hod.yaml $(DESTDIR)$(SHAREDIR)/m2hod.yaml.example
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/m2ho/m2hod.yaml ]; then \
		echo "kept $(DESTDIR)$(SYSCONFDIR)/m2ho/m2hod.yaml (the example is $(SHAREDIR)/m2hod.yaml.example)"; \
	else install -D -m 0644 deploy/m2hod.yaml $(DESTDIR)$(SYSCONFDIR)/m2ho/m2hod.yaml; fi

# uninstall removes what install put, but the configuration, which is the
# operator's.
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED_FILES))
	-rmdir $(DESTDIR)$(SHAREDIR) 2>/dev/null

# dist builds the release artefacts into $(DIST): static m2hod binaries
# for amd64 and arm64 and a Debian package of each, made by nfpm (a tool
# dependency in go.mod) from the tree `make install PREFIX=/usr` stages.
DIST ?= $(BIN)/dist
DIST_ARCHES ?= amd64 arm64
# Debian versions start with a digit: a release tag without its v, or
# 0.0.0+git<commit> between releases.
DEB_VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' 2>/dev/null); \
	if [ -n "$$v" ]; then echo "$${v#v}"; else echo "0.0.0+git$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; fi)

dist: $(addprefix dist-,$(DIST_ARCHES))

dist-%:
	@mkdir -p $(DIST)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' \
		-o $(DIST)/m2hod-linux-$* ./cmd/m2hod
	rm -rf $(DIST)/stage-$*
	$(MAKE) --no-print-directory install DESTDIR=$(DIST)/stage-$* PREFIX=/usr M2HOD_BIN=$(DIST)/m2hod-linux-$* >/dev/null
	$(GO) build -o $(DIST)/nfpm github.com/goreleaser/nfpm/v2/cmd/nfpm
	cp deploy/package/postinst.sh deploy/package/postrm.sh $(DIST)/stage-$*/
	cd $(DIST)/stage-$* && DIST_ARCH=$* DEB_VERSION=$(DEB_VERSION) \
		../nfpm package --config $(CURDIR)/deploy/package/nfpm.yaml --packager deb --target ../
	rm -rf $(DIST)/stage-$* $(DIST)/nfpm

clean:
	rm -rf $(BIN) out
