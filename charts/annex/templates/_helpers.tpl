{{/*
Helpers of the Annex chart. The namespace is always annex-system: the
agent, the peering protocol and the admission policies are bound to it.
*/}}

{{/*
annex.checkRelease refuses what `annexctl install` refuses that depends on
the cluster (looked up; nothing is found with helm template or helm lint):
a release in annex-system (the chart owns that namespace, and Helm keeps
the release in its namespace before creating any object), an install over a
different Annex version, or over an uninstall in progress.
*/}}
{{- define "annex.checkRelease" -}}
{{- if eq .Release.Namespace "annex-system" -}}
{{- fail "the chart creates and owns the namespace annex-system, so its release cannot be kept there: install the release into another namespace (helm install annex charts/annex --namespace default)" -}}
{{- end -}}
{{- $ns := lookup "v1" "Namespace" "" "annex-system" -}}
{{- $installed := dig "metadata" "labels" "annex.dev/version" "" $ns -}}
{{- if and $installed (ne $installed .Chart.AppVersion) -}}
{{- fail (printf "Annex %s is already installed; this chart is %s: uninstall it with the matching version first" $installed .Chart.AppVersion) -}}
{{- end -}}
{{- if dig "metadata" "deletionTimestamp" "" $ns -}}
{{- fail "namespace annex-system is being deleted (an uninstall is in progress); wait for it to finish" -}}
{{- end -}}
{{- end -}}

{{/*
annex.clusterID is the cluster ID, as `annexctl install` chooses it: the
installed one (a different clusterID value is refused), else the value,
else derived from the kube-system namespace's UID.
*/}}
{{- define "annex.clusterID" -}}
{{- $installed := dig "data" "clusterID" "" (lookup "v1" "ConfigMap" "annex-system" "annex-cluster-identity") -}}
{{- $wanted := .Values.clusterID -}}
{{- if and $wanted $installed (ne $wanted $installed) -}}
{{- fail (printf "this cluster is already installed as %q; changing its cluster ID to %q would break its peerings (uninstall first)" $installed $wanted) -}}
{{- end -}}
{{- if $installed -}}
{{- $installed -}}
{{- else if $wanted -}}
{{- $wanted -}}
{{- else -}}
{{- $uid := dig "metadata" "uid" "" (lookup "v1" "Namespace" "" "kube-system") -}}
{{- if not $uid -}}
{{- fail "clusterID is required when the chart is rendered without a cluster to look it up in (helm template, --dry-run=client): set clusterID, a DNS label of at most 32 characters" -}}
{{- end -}}
{{- printf "cluster-%s" (trunc 8 $uid) -}}
{{- end -}}
{{- end -}}

{{/*
annex.checkCIDRs refuses IPv4 CIDRs with host bits set and overlapping
ones, as `annexctl install` does (the schema checks their form). IPv6 ones
are left to annexctl: templates have no 128-bit arithmetic.
*/}}
{{- define "annex.checkCIDRs" -}}
{{- $seen := list -}}
{{- range $key := list "podCIDR" "serviceCIDR" "externalCIDR" -}}
{{- $cidr := index $.Values $key -}}
{{- if regexMatch "^[0-9.]+/[0-9]+$" $cidr -}}
{{- $parts := splitList "/" $cidr -}}
{{- $addr := 0 -}}
{{- range splitList "." (first $parts) -}}
{{- $addr = add (mul $addr 256) (atoi .) -}}
{{- end -}}
{{- $size := 1 -}}
{{- range until (int (sub 32 (atoi (last $parts)))) -}}
{{- $size = mul $size 2 -}}
{{- end -}}
{{- $start := sub $addr (mod $addr $size) -}}
{{- if ne (int64 $start) (int64 $addr) -}}
{{- $masked := printf "%d.%d.%d.%d/%s" (div $start 16777216) (mod (div $start 65536) 256) (mod (div $start 256) 256) (mod $start 256) (last $parts) -}}
{{- fail (printf "%s %q has host bits set; did you mean %s?" $key $cidr $masked) -}}
{{- end -}}
{{- range $seen -}}
{{- if and (lt (int64 $start) (add .start .size)) (lt (int64 .start) (add $start $size)) -}}
{{- fail (printf "%s %s overlaps %s %s" $key $cidr .key .cidr) -}}
{{- end -}}
{{- end -}}
{{- $seen = append $seen (dict "key" $key "cidr" $cidr "start" $start "size" $size) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
annex.checkAgent refuses the combinations `annexctl install` refuses.
*/}}
{{- define "annex.checkAgent" -}}
{{- if .Values.gateway.endpoint -}}
{{- if not .Values.agent.enabled -}}
{{- fail "gateway.endpoint deploys the gateway with the agent: it cannot be combined with agent.enabled=false (run annex-gateway yourself and give the agent --gateway-config)" -}}
{{- end -}}
{{- else if .Values.gateway.node -}}
{{- fail "gateway.node needs gateway.endpoint (the address of that node)" -}}
{{- end -}}
{{- end -}}

{{/*
annex.image is the agent's image reference.
*/}}
{{- define "annex.image" -}}
{{- with .Values.image -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository (.tag | default $.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
{{- end -}}
