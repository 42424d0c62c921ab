package config

import (
	"net"
	"time"
)

// HA configures how this control plane takes part with others sharing the
// same (PostgreSQL) store: one leader owns the fleet, the others stand by.
type HA struct {
	// Name is this control plane's name among those on the store, shown by
	// `ctl status`; each needs its own: a second live process under a name
	// exits at start, and one restarted under its name takes the lease once
	// its predecessor's has run out or was given up (ha.md).
	// Default: the host name.
	Name string `koanf:"name" yaml:"name,omitempty" json:"name,omitempty"`
	// AdvertiseAgents is the host:port a standby sends agents to while this
	// control plane leads.
	// Default: `agent_listen` (host name when its host is empty).
	// Type: address.
	AdvertiseAgents string `koanf:"advertise_agents" yaml:"advertise_agents,omitempty" json:"advertise_agents,omitempty"`
	// AdvertiseManage is where a standby relays management calls while this
	// control plane leads.
	// Default: `manage_listen`, as above.
	// Type: address.
	AdvertiseManage string `koanf:"advertise_manage" yaml:"advertise_manage,omitempty" json:"advertise_manage,omitempty"`
	// AdvertiseClient is the client API's address, as `ctl status` shows it.
	// Default: `listen`, as above.
	// Type: address.
	AdvertiseClient string `koanf:"advertise_client" yaml:"advertise_client,omitempty" json:"advertise_client,omitempty"`
	// Lease is how long the leader lease lasts without a renewal: the longest
	// a dead leader keeps the fleet; at least `1s`.
	Lease time.Duration `koanf:"lease" yaml:"lease" json:"lease"`
	// Renew is how often the leader renews; at most half of `ha.lease`.
	Renew time.Duration `koanf:"renew" yaml:"renew" json:"renew"`
	// Retry is how often a standby tries to take the lease; at most
	// `ha.lease`.
	Retry time.Duration `koanf:"retry" yaml:"retry" json:"retry"`
	// ManageCA is the CA that verifies the leader's management certificate
	// when a standby relays to it.
	// Default: `agent_tls.ca`.
	// Type: path.
	ManageCA string `koanf:"manage_ca" yaml:"manage_ca,omitempty" json:"manage_ca,omitempty"`
}

// DefaultHA: a leader that dies is replaced within Lease + Retry = 7s.
func DefaultHA() HA {
	return HA{Lease: 6 * time.Second, Renew: 2 * time.Second, Retry: time.Second}
}

func (h HA) validate(add func(key, format string, args ...any)) {
	if h.Lease < time.Second {
		add("ha.lease", "%s: must be at least 1s", h.Lease)
	}
	if h.Renew <= 0 || h.Renew*2 > h.Lease {
		add("ha.renew", "%s: must be positive and at most half of ha.lease (%s), so one failed renewal does not lose the lease", h.Renew, h.Lease)
	}
	if h.Retry <= 0 || h.Retry > h.Lease {
		add("ha.retry", "%s: must be positive and at most ha.lease (%s)", h.Retry, h.Lease)
	}
	for _, a := range []struct{ key, val string }{
		{"ha.advertise_agents", h.AdvertiseAgents}, {"ha.advertise_manage", h.AdvertiseManage}, {"ha.advertise_client", h.AdvertiseClient},
	} {
		if a.val == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a.val)
		if err != nil || host == "" || port == "" || port == "0" {
			add(a.key, "%q must be host:port with both set (the address others reach this control plane at)", a.val)
		}
	}
}
