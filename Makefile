# Annex developer entry points. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# A release sets VERSION; development builds keep internal/version's default so
# that rebuilding does not make `annexctl install` see a different version.
VERSION ?=
LDFLAGS := $(if $(VERSION),-X github.com/annexhq/annex/internal/version.Version=$(VERSION))
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
# Pinned; built from the module proxy on first use (a few minutes), cached after.
GOLANGCI_LINT := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
# Pinned like golangci-lint; go caches the built binary, so later runs start at once.
HELM := $(GO) run helm.sh/helm/v4/cmd/helm@v4.3.2
E2E_TIMEOUT ?= 32m
BENCH_SCALE ?= small
BENCH_ARGS ?=
# A count of executions, not a duration: when a duration ends, Go 1.26's fuzz
# coordinator can fail the target with a spurious "context deadline exceeded"
# on a busy machine (go.dev/issue/75804, fixed in Go 1.27; CI hit it on
# FuzzAdmission and, in session 9, FuzzAllocator). 10000 executions take
# 2-8 s per target here.
FUZZTIME ?= 10000x

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN{FS=":.*## "} /^[a-z-]+:.*## /{printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/annexctl, bin/annex-agent, bin/annex-gateway and bin/annex-fabric.
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./cmd/annexctl ./cmd/annex-agent ./cmd/annex-gateway ./cmd/annex-fabric

.PHONY: image
image: ## Build the annex-agent, pause and echo images without Docker into bin/images/<name>.tar (OCI archives for `ctr -n k8s.io images import`).
	$(GO) run ./hack/image -out bin/images $(if $(VERSION),-version $(VERSION))

.PHONY: generate
generate: ## Regenerate deepcopy code, the chart's CRDs (charts/annex/crds) and agent RBAC (charts/annex/templates/rbac/role.yaml).
	$(CONTROLLER_GEN) object paths=./apis/...
	$(CONTROLLER_GEN) crd paths=./apis/... output:crd:dir=charts/annex/crds
	$(CONTROLLER_GEN) rbac:roleName=annex-agent paths=./internal/... output:rbac:dir=charts/annex/templates/rbac

.PHONY: verify
verify: generate ## Fail if generated code is stale, code is not gofmt'ed, go vet, golangci-lint or helm lint complains.
	@if [ -n "$$(git status --porcelain -- apis charts)" ]; then \
		echo "generated files are out of date; run 'make generate' and commit:"; git status --porcelain -- apis charts; exit 1; fi
	@if [ -n "$$(gofmt -l $$(git ls-files '*.go'))" ]; then echo "not gofmt'ed:"; gofmt -l $$(git ls-files '*.go'); exit 1; fi
	$(GO) vet ./...
	cd tools/kube && $(GO) vet ./...
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory chart-lint

.PHONY: lint
lint: ## Run golangci-lint (errcheck, gosec, govet, ineffassign, staticcheck, unused; .golangci.yml) on both modules.
	$(GOLANGCI_LINT) run ./...
	cd tools/kube && $(GOLANGCI_LINT) run ./...

.PHONY: chart-lint
chart-lint: ## helm lint charts/annex (helm v4.3.2, built with go run on first use), with its defaults and with charts/annex/ci/*.yaml.
	$(HELM) lint --strict charts/annex
	@for f in charts/annex/ci/*.yaml; do echo "$(HELM) lint --strict charts/annex -f $$f"; $(HELM) lint --strict charts/annex -f $$f; done

.PHONY: tools
tools: ## Build the Kubernetes binaries (only those missing) and print their cache directory.
	@cd tools/kube && $(GO) run .

.PHONY: node-deps
node-deps: ## As root, install what real nodes need (containerd, runc, CNI plugins, nft) with apt-get when missing.
	@hack/node-deps.sh

.PHONY: test
test: tools node-deps ## Unit tests, a short fuzz run, then e2e tests on real local clusters (builds the binaries on first use).
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/e2e)
	$(MAKE) --no-print-directory fuzz
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/...

.PHONY: fuzz
fuzz: ## Run every fuzz target (func Fuzz* under internal/) for FUZZTIME each (default 10000x: 10000 executions).
	@for f in $$(grep -rl --include='*_test.go' '^func Fuzz' internal); do \
		for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -d' ' -f2); do \
			echo "fuzz ./$$(dirname $$f) $$t for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f); \
		done; \
	done

.PHONY: demo
demo: build image tools node-deps ## Start the sandbox, peer alpha with beta and gamma, offload a namespace and run a Deployment there.
	hack/demo.sh

.PHONY: bench
bench: build tools ## Run the benchmarks on fresh local clusters (BENCH_SCALE=small|full; BENCH_ARGS for more flags) and write bench/results/.
	$(GO) run ./bench -scale $(BENCH_SCALE) -out bench/results $(BENCH_ARGS)
