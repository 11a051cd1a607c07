// Package gateway owns the data plane of Annex's network links: it makes
// the mappings of NetworkConfigurations (docs/network.md) real in the
// network namespace it runs in. For every link it runs a userspace
// WireGuard device (golang.zx2c4.com/wireguard, no kernel module) named
// after the peer, routes the packets meant for the peer into it by firewall
// mark, and translates addresses with nftables (github.com/google/nftables)
// at the sender: destinations from this cluster's view of the peer to the
// peer's own, sources from this cluster's own ranges to the peer's view of
// them. Replies are undone by connection tracking.
//
// On a node's host network the gateway shares its namespace with kube-proxy.
// A pod's packet to a Service whose endpoint is behind a link gets its
// destination translated by kube-proxy after the gateway chose the link by
// destination, so a second chain chooses again, just after destination NAT,
// for packets still without a link. (Such an endpoint in a remapped range
// gets kube-proxy's translation only, not the gateway's, and is not
// reached.) Link marks keep clear of the bits kube-proxy masquerades and
// drops by, 0x4000 and 0x8000.
//
// Each link has its own accept list: the destinations, in this cluster's
// own addresses, that the peer may open connections to (by default the
// pods of that peer's remote namespaces here and the transit addresses it
// is owed; the agent decides, see internal/controller/gatewayconfig). The
// gateway keeps it in an nftables interval set per link, and drops new
// connections from the link to anything else.
//
// The input is a declarative Config (a JSON file for cmd/annex-gateway);
// Apply makes the namespace match it and is idempotent: devices are kept
// (and their WireGuard sessions with them) while their tunnel settings are
// unchanged; a Config that differs from the last one only in accept lists
// updates those sets in one transaction, anything else rebuilds the
// nftables table "annex" in one transaction; rules and routes are
// replaced, and what belongs to links no longer in the Config is removed.
package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"

	"golang.org/x/crypto/curve25519"
)

// Key is a WireGuard key (Curve25519), base64 in JSON.
type Key [32]byte

// GenerateKey returns a new private key.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return Key{}, err
	}
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k, nil
}

// Public returns the public key of private key k.
func (k Key) Public() (Key, error) {
	pub, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		return Key{}, err
	}
	var out Key
	copy(out[:], pub)
	return out, nil
}

// String is the key in base64.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// MarshalText implements encoding.TextMarshaler.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Key) UnmarshalText(b []byte) error {
	raw, err := base64.StdEncoding.DecodeString(string(b))
	if err != nil || len(raw) != len(k) {
		return errors.New("a WireGuard key is 32 bytes in base64")
	}
	copy(k[:], raw)
	return nil
}

// Netmap translates a whole prefix to another of the same length, keeping
// host bits.
type Netmap struct {
	From netip.Prefix `json:"from"`
	To   netip.Prefix `json:"to"`
}

// Link is one network link, from this side.
type Link struct {
	// Peer is the remote cluster's ID; the device is "annex-<peer>" (the
	// ID is cut to fit an interface name).
	Peer string `json:"peer"`
	// ListenPort is this side's UDP port for the link.
	ListenPort int `json:"listenPort"`
	// PrivateKey is this side's key for the link.
	PrivateKey Key `json:"privateKey"`
	// PeerPublicKey and PeerEndpoint (ip:port) reach the peer's gateway.
	PeerPublicKey Key            `json:"peerPublicKey"`
	PeerEndpoint  netip.AddrPort `json:"peerEndpoint"`
	// Routes are the destinations, in this cluster's view, that go to the
	// peer (its pod and external CIDRs as this cluster sees them).
	Routes []netip.Prefix `json:"routes"`
	// DNAT maps destinations from this cluster's view to the peer's own.
	DNAT []Netmap `json:"dnat,omitempty"`
	// SNAT maps this cluster's sources to the peer's view of them.
	SNAT []Netmap `json:"snat,omitempty"`
	// AllowedSources are the source ranges accepted from the peer: its own
	// CIDRs (replies) and this cluster's view of them (its requests).
	AllowedSources []netip.Prefix `json:"allowedSources"`
	// Transit are this cluster's transit addresses of pods running on the
	// peer: a packet to Address (arriving from another link) is sent to
	// the peer with its destination rewritten to To, the pod's address in
	// the peer's own view.
	Transit []Transit `json:"transit,omitempty"`
	// Masquerade is the source address, in the peer's view, of packets this
	// gateway relays to the peer from another link (transit): this
	// gateway's own address in this cluster's external CIDR. Required with
	// Transit.
	Masquerade netip.Addr `json:"masquerade,omitzero"`
	// Accept are the destinations, in this cluster's own addresses, that
	// the peer may open connections to through this link (single
	// addresses are /32 prefixes; overlapping and adjacent prefixes are
	// merged). Packets of new connections arriving from the link for
	// anything else are dropped, so the peer cannot reach the gateway's
	// node, this cluster's other networks or pods, or, through this
	// cluster, another peer's pods it was not given a transit address of.
	// Empty: the peer may open no connection at all (replies to this
	// cluster's connections always pass). At most MaxAccept entries.
	Accept []netip.Prefix `json:"accept"`
}

// MaxAccept bounds the entries of one link's accept list.
const MaxAccept = 65536

// Transit is one transit address and the address it leads to.
type Transit struct {
	Address netip.Addr `json:"address"`
	To      netip.Addr `json:"to"`
}

// Config is everything a gateway programs.
type Config struct {
	Links []Link `json:"links"`
	// PodCIDR and OwnPods bound what this cluster's pods send into links:
	// a new connection from an address of PodCIDR leaves through a link
	// only when its source is in that link's Accept list or in OwnPods
	// (this cluster's own pods: those of no tenant). So a tenant's pod
	// opens connections only to its own consumer (whose link accepts it),
	// or through a link made for direct connections (which accepts every
	// tenant's pods), never to another peer; and a pod the agent has not
	// classified yet (just started) opens none. Relayed packets (in
	// through a link, out through another) and sources outside PodCIDR
	// (the nodes) are not bound. Invalid PodCIDR: nothing is bound.
	PodCIDR netip.Prefix   `json:"podCIDR,omitzero"`
	OwnPods []netip.Prefix `json:"ownPods,omitempty"`
}

var peerName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Validate checks c before anything is programmed. The gateway translates
// IPv4 only: every prefix and address must be IPv4.
func (c *Config) Validate() error {
	if c.PodCIDR.IsValid() {
		if err := checkPrefixes("podCIDR", []netip.Prefix{c.PodCIDR}); err != nil {
			return err
		}
	}
	if len(c.OwnPods) > MaxAccept {
		return fmt.Errorf("ownPods has %d entries, more than %d", len(c.OwnPods), MaxAccept)
	}
	if err := checkPrefixes("ownPods", c.OwnPods); err != nil {
		return err
	}
	seen := map[string]bool{}
	ports := map[int]bool{}
	for _, l := range c.Links {
		switch {
		case !peerName.MatchString(l.Peer):
			return fmt.Errorf("link %q: peer must be a cluster ID (lowercase letters, digits, dashes)", l.Peer)
		case seen[DeviceName(l.Peer)]:
			return fmt.Errorf("link %q: two links would share device %s", l.Peer, DeviceName(l.Peer))
		case l.ListenPort <= 0 || l.ListenPort > 65535 || ports[l.ListenPort]:
			return fmt.Errorf("link %q: listenPort %d is invalid or used twice", l.Peer, l.ListenPort)
		case !l.PeerEndpoint.IsValid():
			return fmt.Errorf("link %q: peerEndpoint is required", l.Peer)
		case !l.PeerEndpoint.Addr().Is4():
			return fmt.Errorf("link %q: peerEndpoint %s is not an IPv4 address and port", l.Peer, l.PeerEndpoint)
		case l.PrivateKey == Key{} || l.PeerPublicKey == Key{}:
			return fmt.Errorf("link %q: privateKey and peerPublicKey are required", l.Peer)
		case len(l.Routes) == 0:
			return fmt.Errorf("link %q: no routes", l.Peer)
		case len(l.AllowedSources) == 0:
			return fmt.Errorf("link %q: no allowedSources", l.Peer)
		}
		if err := checkPrefixes(fmt.Sprintf("link %q: routes", l.Peer), l.Routes); err != nil {
			return err
		}
		if err := checkPrefixes(fmt.Sprintf("link %q: allowedSources", l.Peer), l.AllowedSources); err != nil {
			return err
		}
		if len(l.Accept) > MaxAccept {
			return fmt.Errorf("link %q: accept has %d entries, more than %d", l.Peer, len(l.Accept), MaxAccept)
		}
		if err := checkPrefixes(fmt.Sprintf("link %q: accept", l.Peer), l.Accept); err != nil {
			return err
		}
		if len(l.Transit) > 0 && !l.Masquerade.Is4() {
			return fmt.Errorf("link %q: transit addresses need an IPv4 masquerade address", l.Peer)
		}
		for _, t := range l.Transit {
			if !t.Address.Is4() || !t.To.Is4() {
				return fmt.Errorf("link %q: transit %s -> %s must map IPv4 addresses", l.Peer, t.Address, t.To)
			}
		}
		for _, m := range append(append([]Netmap{}, l.DNAT...), l.SNAT...) {
			if !m.From.IsValid() || !m.To.IsValid() || m.From.Bits() != m.To.Bits() || !m.From.Addr().Is4() || !m.To.Addr().Is4() {
				return fmt.Errorf("link %q: netmap %s -> %s must map IPv4 prefixes of equal length", l.Peer, m.From, m.To)
			}
		}
		seen[DeviceName(l.Peer)] = true
		ports[l.ListenPort] = true
	}
	return nil
}

// checkPrefixes fails unless every prefix of ps is a valid IPv4 prefix.
func checkPrefixes(what string, ps []netip.Prefix) error {
	for _, p := range ps {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("%s: %s is not an IPv4 prefix", what, p)
		}
	}
	return nil
}

// ParseConfig decodes a Config from JSON, refusing unknown fields (a
// misspelt field would otherwise be silently ignored) and trailing data,
// and validates it.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, err
	}
	if dec.More() {
		return Config{}, errors.New("data after the configuration")
	}
	return c, c.Validate()
}

// devicePrefix starts the name of every link's device.
const devicePrefix = "annex-"

// DeviceName is the WireGuard device of the link with peer.
func DeviceName(peer string) string {
	name := devicePrefix + peer
	if len(name) > 15 { // IFNAMSIZ - 1
		name = name[:15]
	}
	return name
}
