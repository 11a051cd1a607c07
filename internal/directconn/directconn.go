// Package directconn is the format of the annex.dev/direct-connections-data
// annotation and the rules for trusting it.
//
// A consumer C that reflects the EndpointSlice of a Service annotated
// annex.dev/use-direct-connections: "true" to provider P writes, on the
// ShadowEndpointSlice, one Entry per endpoint that lives on another provider
// Q: Q's cluster ID, the address as written in the slice (a transit address
// of C in P's view) and the pod's address in Q's own network. The value is
// a JSON array of entries, sorted by address, at most MaxSize bytes.
//
// P treats it as untrusted input from a tenant (Resolve): an entry is used
// only if P has a network link with Q, the address is one of the slice's,
// the pod address lies in the pod CIDR P's link records for Q, and neither
// address appears in another entry. A used entry replaces the address by
// the pod address in P's own view of Q's pod CIDR; every other endpoint
// keeps its transit address.
package directconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/annexhq/annex/internal/network"
)

// MaxSize bounds the annotation's value (bytes).
const MaxSize = 256 << 10

// ErrTooLarge says the entries do not fit in MaxSize.
var ErrTooLarge = fmt.Errorf("direct-connections data larger than %d bytes", MaxSize)

// Entry describes one endpoint that lives on another provider.
type Entry struct {
	// ClusterID is the provider the endpoint's pod runs on.
	ClusterID string `json:"clusterID"`
	// Address is the endpoint's address as written in the slice.
	Address string `json:"address"`
	// PodAddress is the pod's address in ClusterID's own network.
	PodAddress string `json:"podAddress"`
}

// Encode returns the annotation value for entries ("" for none), or
// ErrTooLarge.
func Encode(entries []Entry) (string, error) {
	if len(entries) == 0 {
		return "", nil
	}
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int { return strings.Compare(a.Address, b.Address) })
	data, err := json.Marshal(sorted)
	if err != nil {
		return "", err
	}
	if len(data) > MaxSize {
		return "", ErrTooLarge
	}
	return string(data), nil
}

// Parse decodes an annotation value. It refuses values over MaxSize,
// anything but a JSON array of entries with exactly the known fields, and
// trailing data.
func Parse(value string) ([]Entry, error) {
	if len(value) > MaxSize {
		return nil, ErrTooLarge
	}
	dec := json.NewDecoder(strings.NewReader(value))
	dec.DisallowUnknownFields()
	var entries []Entry
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("malformed direct-connections data: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("malformed direct-connections data: trailing data after the array")
	}
	return entries, nil
}

// Links are the provider's network links, by remote cluster ID: the
// mapping of each remote cluster's pod CIDR (Original in the remote
// cluster's own view, Remapped in this cluster's view, if remapped).
type Links map[string]network.Mapping

// Resolve checks entries against the slice's addresses and the provider's
// links. It returns the rewrites to apply (slice address → address in this
// cluster's view) and one message per refused entry. An entry for a cluster
// without a link is refused too: its endpoint keeps the transit route.
func Resolve(entries []Entry, sliceAddresses map[string]bool, links Links) (map[string]string, []string) {
	count := map[string]int{}
	for _, e := range entries {
		count["a/"+e.Address]++
		count["p/"+e.PodAddress]++
	}
	rewrites := map[string]string{}
	var problems []string
	refuse := func(e Entry, why string) {
		problems = append(problems, fmt.Sprintf("%s (cluster %q, pod address %q): %s", quoteish(e.Address), e.ClusterID, e.PodAddress, why))
	}
	for _, e := range entries {
		link, ok := links[e.ClusterID]
		switch {
		case !ok:
			refuse(e, "no network link with that cluster")
			continue
		case !sliceAddresses[e.Address]:
			refuse(e, "not an address of this slice")
			continue
		case count["a/"+e.Address] > 1:
			refuse(e, "address listed more than once")
			continue
		case count["p/"+e.PodAddress] > 1:
			refuse(e, "pod address listed more than once")
			continue
		}
		pod, err := netip.ParseAddr(e.PodAddress)
		if err != nil || pod.Zone() != "" {
			refuse(e, "pod address is not an IP address")
			continue
		}
		if !link.Original.Contains(pod) {
			refuse(e, fmt.Sprintf("pod address outside the cluster's pod CIDR %s", link.Original))
			continue
		}
		local, err := link.ToLocal(pod)
		if err != nil {
			refuse(e, err.Error())
			continue
		}
		rewrites[e.Address] = local.String()
	}
	return rewrites, problems
}

// Summary joins problems into one bounded message.
func Summary(problems []string) string {
	const show = 5
	if len(problems) <= show {
		return strings.Join(problems, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(problems[:show], "; "), len(problems)-show)
}

// quoteish quotes s for a message, bounded so a hostile value cannot flood
// an Event.
func quoteish(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}
