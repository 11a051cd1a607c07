#!/usr/bin/env bash
# make demo: the sandbox, peered and offloading. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBE_BIN="$(cd tools/kube && go run . -print-dir)/bin"
DIR="${ANNEX_SANDBOX_DIR:-$HOME/.annex/sandbox}"
A="$DIR/alpha/kubeconfig"
k() { "$KUBE_BIN/kubectl" --kubeconfig "$A" "$@"; }

bin/annexctl sandbox up --dir "$DIR"
for p in beta gamma; do
  echo "== peering alpha with $p"
  bin/annexctl peer --kubeconfig "$A" --remote-kubeconfig "$DIR/$p/kubeconfig"
done
echo "== offloading namespace demo (pods only on providers)"
k get namespace demo >/dev/null 2>&1 || k create namespace demo
bin/annexctl offload namespace demo --kubeconfig "$A" --pod-strategy Remote
k -n demo get deployment web >/dev/null 2>&1 || k -n demo create deployment web --image=nginx --replicas=6
k -n demo get service web >/dev/null 2>&1 || k -n demo expose deployment web --port 80
k -n demo rollout status deployment web --timeout=120s
echo "== pods on alpha (nodes annex-beta and annex-gamma are the providers)"
k -n demo get pods -o wide
echo "== nodes of alpha"
k get nodes
echo "== annexctl status"
bin/annexctl status --kubeconfig "$A"
cat <<MSG

Try a failure: bin/annexctl sandbox kill beta --dir $DIR
  then watch: $KUBE_BIN/kubectl --kubeconfig $A -n demo get pods -o wide -w
Remove it all: bin/annexctl sandbox down --dir $DIR
MSG
