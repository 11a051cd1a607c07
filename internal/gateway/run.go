package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
)

// Applier is what Run drives (a *Dataplane).
type Applier interface {
	Apply(Config) error
	Stats(peer string) (Stats, bool)
	Close() error
}

// Stats reports a link's WireGuard state.
type Stats struct {
	LastHandshakeUnix int64
	RxBytes, TxBytes  int64
}

// LinkStatus is one link's entry in the status file.
type LinkStatus struct {
	Peer          string    `json:"peer"`
	LastHandshake time.Time `json:"lastHandshake,omitzero"`
	RxBytes       int64     `json:"rxBytes"`
	TxBytes       int64     `json:"txBytes"`
}

// resync is how often the Config is applied again although the file did
// not change, repairing whatever else changed the namespace (a deleted
// rule or route); Apply is idempotent, so this changes nothing otherwise.
const resync = 30 * time.Second

// poll is how often, between two reads of the configuration file, its
// modification time and size are looked at: a file the agent rewrote is
// applied within poll, not within the (longer) interval.
const poll = 250 * time.Millisecond

// fileStamp is what tells a rewritten file apart cheaply.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// Run applies the Config in configPath, again whenever the file changes
// (its modification time and size are looked at every 250 ms, the whole
// file read every interval), every resync and, on error, until it
// succeeds; it writes the links' state to statusPath (when set) every
// interval. When ctx ends it removes everything it programmed.
func Run(ctx context.Context, log logr.Logger, dp Applier, configPath, statusPath string, interval time.Duration) error {
	var applied []byte
	var appliedAt, readAt, statusAt time.Time
	var seen fileStamp
	var cfg Config
	tick := time.NewTicker(min(interval, poll))
	defer tick.Stop()
	for {
		now := time.Now()
		st, statErr := stampOf(configPath)
		if statErr != nil || st != seen || now.Sub(readAt) >= interval {
			readAt, seen = now, st
			data, err := os.ReadFile(configPath) //nolint:gosec // G304: the path is the operator's --config flag
			switch {
			case err != nil:
				log.Error(err, "Cannot read the configuration", "path", configPath)
			case bytes.Equal(data, applied) && time.Since(appliedAt) >= resync:
				if err := dp.Apply(cfg); err != nil {
					log.Error(err, "Cannot apply the configuration again; retrying", "path", configPath)
					break
				}
				appliedAt = time.Now()
			case !bytes.Equal(data, applied):
				next, err := ParseConfig(data)
				if err != nil {
					log.Error(err, "Invalid configuration", "path", configPath)
					break
				}
				if err := dp.Apply(next); err != nil {
					log.Error(err, "Cannot apply the configuration; retrying", "path", configPath)
					break
				}
				applied, cfg, appliedAt = data, next, time.Now()
				accept := 0
				for _, l := range cfg.Links {
					accept += len(l.Accept)
				}
				log.Info("Configuration applied", "links", len(cfg.Links), "acceptEntries", accept)
			}
		}
		if statusPath != "" && now.Sub(statusAt) >= interval {
			statusAt = now
			if err := writeStatus(dp, cfg, statusPath); err != nil {
				log.Error(err, "Cannot write the status", "path", statusPath)
			}
		}
		select {
		case <-ctx.Done():
			return dp.Close()
		case <-tick.C:
		}
	}
}

func writeStatus(dp Applier, cfg Config, path string) error {
	out := []LinkStatus{}
	for _, l := range cfg.Links {
		s, ok := dp.Stats(l.Peer)
		if !ok {
			continue
		}
		st := LinkStatus{Peer: l.Peer, RxBytes: s.RxBytes, TxBytes: s.TxBytes}
		if s.LastHandshakeUnix > 0 {
			st.LastHandshake = time.Unix(s.LastHandshakeUnix, 0).UTC()
		}
		out = append(out, st)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil { //nolint:gosec // G306: peers and byte counters, no secret; the agent reads it
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
