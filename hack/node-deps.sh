#!/usr/bin/env bash
# Installs what real nodes need (containerd, runc, the CNI plugins, ipset for
# kube-router's NetworkPolicy firewall, and nft, with which the tests compare
# a node's rulesets) from the
# distribution's packages when they are missing. Real nodes need root; as
# another user this only says what is missing, and the tests that need real
# nodes skip with the same message.
set -euo pipefail
missing=()
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || missing+=(containernetworking-plugins)
command -v ipset >/dev/null || missing+=(ipset)
command -v nft >/dev/null || missing+=(nftables)
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "real nodes need ${missing[*]} (Debian/Ubuntu: apt-get install ${missing[*]}) and root; tests on real nodes will be skipped" >&2
	exit 0
fi
echo "installing ${missing[*]} for real nodes (apt-get)..." >&2
export DEBIAN_FRONTEND=noninteractive
# --no-install-recommends: no system-wide CNI config or extra services; the
# nodes run their own containerd with their own paths. A failed install is
# reported, not fatal: the tests that need real nodes then skip and say why.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
	echo "WARNING: apt-get could not install ${missing[*]}; tests on real nodes will be skipped" >&2
fi
