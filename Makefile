# Concert — thin wrapper around meson/ninja that also installs what a fresh
# Debian 12 machine is missing. See README.md.
BUILD      ?= build
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc/concert
MESON_OPTS ?=

BUILD_PKGS := g++ make meson ninja-build pkg-config python3 libevent-dev liburing-dev libssl-dev \
              libboost-dev libyaml-cpp-dev nlohmann-json3-dev doctest-dev libbenchmark-dev node-llhttp \
              libjs-chart.js libhiredis-dev
TEST_PKGS  := curl chromium mandoc procps prometheus redis-server redis-sentinel
BENCH_PKGS := wrk haproxy nginx-light apache2-utils linux-perf redis-server
FUZZ_PKGS  := clang libclang-rt-14-dev
DEB_PKGS   := dpkg-dev debhelper lintian fakeroot

# axe-core, the accessibility checker the browser test runs in Chromium:
# from the npm registry (Debian does not package it), into the build folder.
AXE_VERSION := 4.14.1
AXE_DIR     := $(BUILD)/axe

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps deps-test deps-bench deps-fuzz deps-deb build run test bench fuzz soak install deb test-deb clean format

all: build

# apt-get only runs when something is missing; `apt-get update` first, once,
# because a fresh machine has no package lists.
define install_missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call install_missing,$(BUILD_PKGS))

deps-test: deps
	$(call install_missing,$(TEST_PKGS))
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing: npm"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; }
	@grep -qs '"version": "$(AXE_VERSION)"' $(AXE_DIR)/node_modules/axe-core/package.json || { \
	  echo "installing: axe-core $(AXE_VERSION) into $(AXE_DIR)"; \
	  npm install --prefix $(AXE_DIR) --no-save --no-audit --no-fund --loglevel=error axe-core@$(AXE_VERSION); }

deps-bench: deps
	$(call install_missing,$(BENCH_PKGS))

deps-fuzz: deps
	$(call install_missing,$(FUZZ_PKGS))

deps-deb: deps
	$(call install_missing,$(DEB_PKGS))

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

# ORIGIN=wordpress: in front of WordPress on php-fpm (bench/wordpress/setup.sh,
# which installs MariaDB, php8.2-fpm, nginx and WordPress when missing; 4
# php-fpm children, Concert -cap 4), stopped again with Ctrl-C.
ORIGIN ?= demo

run: build
ifeq ($(ORIGIN),wordpress)
	bash bench/wordpress/setup.sh -n 4
	@echo "Concert in front of WordPress: http://127.0.0.1:8080/ (Ctrl-C stops both)"
	@trap 'bash bench/wordpress/stop.sh' EXIT INT TERM; \
	  $(BUILD)/concert -c conf/concert.yaml -state-dir "" -cap 4 -listen 127.0.0.1:8080 \
	    -upstream http://127.0.0.1:8380 -assets '/wp-content/*,/wp-includes/*' || true
else
	@python3 demo/run.py --concert $(BUILD)/concert --config conf/concert.yaml
endif

test: deps-test build
	python3 tests/run_all.py --build $(BUILD)

bench: deps-bench build
	bash bench/run.sh $(BUILD)

fuzz: deps-fuzz
	bash tests/fuzz/run.sh

soak: deps-test build
	python3 tests/run_all.py --build $(BUILD) --soak

install: build
	install -D -m 0755 $(BUILD)/concert $(DESTDIR)$(PREFIX)/sbin/concert
	install -D -m 0644 man/concert.8 $(DESTDIR)$(PREFIX)/share/man/man8/concert.8
	install -d $(DESTDIR)$(PREFIX)/share/concert/html
	install -m 0644 html/waiting_room.html html/dashboard.html $(BUILD)/html/busy.html $(BUILD)/html/queue_full.html \
	  $(BUILD)/html/maintenance.html $(DESTDIR)$(PREFIX)/share/concert/html/
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/concert.yaml ]; then \
	  echo "keeping existing $(DESTDIR)$(SYSCONFDIR)/concert.yaml"; \
	else \
	  install -D -m 0644 conf/concert.yaml $(DESTDIR)$(SYSCONFDIR)/concert.yaml; \
	fi

# The Debian package, built from a copy of the tree in $(BUILD)/deb/src with
# dpkg-buildpackage; the .deb lands in $(BUILD)/deb. DEB_VERSION=x builds it
# as version x (a changelog entry on top of the copy's), as an upgrade would.
DEB_DIR     := $(BUILD)/deb
DEB_VERSION ?=

deb: deps-deb
	rm -rf $(DEB_DIR)/src && mkdir -p $(DEB_DIR)/src
	tar --exclude=./.git --exclude='./$(BUILD)' --exclude='./build' -cf - . | tar -xf - -C $(DEB_DIR)/src
	@if [ -n "$(DEB_VERSION)" ]; then \
	  who=$$(sed -n 's/^ -- \(.*>\)  .*/\1/p' debian/changelog | head -1); \
	  { printf 'concert (%s) unstable; urgency=medium\n\n  * Rebuilt as %s.\n\n -- %s  %s\n\n' \
	      "$(DEB_VERSION)" "$(DEB_VERSION)" "$$who" "$$(date -R)"; cat debian/changelog; } > $(DEB_DIR)/src/debian/changelog; \
	fi
	cd $(DEB_DIR)/src && dpkg-buildpackage -us -uc -b -j$$(nproc)
	@ls -1 $(DEB_DIR)/*.deb

# Installs the package on this machine, upgrades it under a running Concert
# and purges it (tests/package/test_deb.py); the machine is left as it was.
test-deb: deps-deb
	python3 tests/package/test_deb.py --build $(BUILD)

format:
	clang-format -i $$(git ls-files 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'bench/*.cpp')

clean:
	rm -rf $(BUILD)
