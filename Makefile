# m2ho build, test and run targets. `sudo make demo` and `sudo make test`
# work on a fresh Debian/Ubuntu machine: missing tools are installed first.

SHELL := /bin/bash
GO ?= go
GOFLAGS ?=
export GOFLAGS

# Pinned BPF compiler settings; bpf2go output is committed and CI checks
# that regenerating it changes nothing, so these must not drift.
BPF_CLANG ?= clang
# The multiarch include directory provides <asm/...> for the uapi headers
# (Debian/Ubuntu layout: /usr/include/x86_64-linux-gnu, aarch64-linux-gnu).
BPF_CFLAGS := -O2 -g -Wall -Werror -mcpu=v3 -fno-ident -I/usr/include/$(shell uname -m)-linux-gnu
export BPF_CLANG BPF_CFLAGS

BIN := bin
# Test-only Python environment with the pycrate RRC oracle.
VENV := .venv
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
APT_PACKAGES := clang llvm libbpf-dev iproute2 ethtool tcpdump nftables python3
# Commands that prove each package is present (same order as above).
APT_PROBES := clang llvm-strip /usr/include/bpf/bpf_helpers.h ip ethtool tcpdump nft python3

.PHONY: all deps build generate test bench fuzz lint demo eval clean

all: build

# deps installs what the build and the tests need when it is missing.
deps:
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

build:
	$(GO) build -o $(BIN)/ ./cmd/... ./test/cmd/...

generate: deps
	$(GO) generate ./pkg/datapath/...

test: deps build $(VENV)/.installed
	$(GO) test -p 1 -count=1 -timeout 20m ./...

bench: deps
	$(GO) test -p 1 -count=1 -run '^$$' -bench . -benchmem -timeout 30m ./...

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
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

demo: deps build
	$(BIN)/m2ho-testbed demo --out out/demo --scenario test/scenarios/demo.yaml --m2hod $(BIN)/m2hod

# eval runs the section 6 evaluation: every variant over a generated corpus
# of at least 120 handovers (about two hours); run it again to resume.
eval: deps build
	$(BIN)/m2ho-testbed eval --out out/eval --m2hod $(BIN)/m2hod

clean:
	rm -rf $(BIN) out
