package chain

import (
	"fmt"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// Settings is the CBR's blocks and the block table as an operator sets
// them: kvca serve's --block-size, --ttl, --max-blocks, --cbr-memo-bytes,
// --hash-key, --cbr-exclude and --predict-ttl, with their defaults,
// validation, flags, and what a reload may change.
type Settings struct {
	BlockSize int
	// TTL is a location's longest idle time; a reload applies it.
	TTL       time.Duration
	MaxBlocks int
	// CBRMemoBytes bounds the memo of long strings already canonicalised
	// and hashed (Memo); 0 turns it off.
	CBRMemoBytes int
	// ResumeMemoBytes bounds the memory for bodies already canonicalised
	// and where their messages began, so that a body resending an earlier
	// one's bytes is canonicalised and hashed only from what it adds
	// (canon's Resumer); 0 turns it off.
	ResumeMemoBytes int
	// HashKey is 32 hex digits; empty draws a random key.
	HashKey string
	// CBRExclude are extra top-level fields left out of the CBR.
	CBRExclude []string
	// PredictTTL, when positive, records the chosen backend as a location
	// of the request's chain at routing time, expiring after
	// min(PredictTTL, TTL) unless the answer confirms it: a burst of
	// requests with a new prefix then follows the first instead of
	// scattering before any of them has answered. kvca serve's flag
	// defaults to 10s; DefaultSettings leaves it off.
	PredictTTL time.Duration
}

// DefaultSettings are the command line's defaults but --predict-ttl's.
func DefaultSettings() Settings {
	return Settings{BlockSize: 256, TTL: 10 * time.Minute, MaxBlocks: 4 << 20, CBRMemoBytes: 64 << 20,
		// The resumer's raw bytes, snapshots and free buffers, as much
		// as the CBR memo: the histories of some 30 to 50 conversations
		// of 1 MB, or 250 to 400 of 128 KB (a body over a quarter of it,
		// 16 MiB, is not remembered). Recording allocates nothing once
		// it is full.
		ResumeMemoBytes: 64 << 20}
}

// Validate fills the block size's default and reports the first mistake
// in one sentence.
func (s *Settings) Validate() error {
	if s.BlockSize == 0 {
		s.BlockSize = DefaultSettings().BlockSize
	}
	if err := CheckBlockSize(s.BlockSize); err != nil {
		return fmt.Errorf("--block-size: %v", err)
	}
	if s.TTL <= 0 {
		return fmt.Errorf("--ttl must be positive, got %v", s.TTL)
	}
	if s.PredictTTL < 0 {
		return fmt.Errorf("--predict-ttl must be 0 (off) or positive, got %v", s.PredictTTL)
	}
	if s.MaxBlocks <= 0 {
		return fmt.Errorf("--max-blocks must be positive, got %d", s.MaxBlocks)
	}
	if s.CBRMemoBytes < 0 {
		return fmt.Errorf("--cbr-memo-bytes must be 0 (off) or positive, got %d", s.CBRMemoBytes)
	}
	if s.ResumeMemoBytes < 0 {
		return fmt.Errorf("--resume-memo-bytes must be 0 (off) or positive, got %d", s.ResumeMemoBytes)
	}
	if s.HashKey != "" {
		if _, err := ParseKey(s.HashKey); err != nil {
			return fmt.Errorf("--hash-key: %v", err)
		}
	}
	return nil
}

// Restart names the settings of next that differ from s and that a
// reload does not apply: the TTL and the prediction's length are applied
// live; the table's shape, the key and the CBR's fields are not.
func (s *Settings) Restart(next *Settings) []string {
	return cliflag.Changed(
		cliflag.Change{Name: "block-size", Differ: s.BlockSize != next.BlockSize},
		cliflag.Change{Name: "max-blocks", Differ: s.MaxBlocks != next.MaxBlocks},
		cliflag.Change{Name: "hash-key", Differ: s.HashKey != next.HashKey},
		cliflag.Change{Name: "cbr-exclude", Differ: !slices.Equal(s.CBRExclude, next.CBRExclude)},
		cliflag.Change{Name: "cbr-memo-bytes", Differ: s.CBRMemoBytes != next.CBRMemoBytes},
		cliflag.Change{Name: "resume-memo-bytes", Differ: s.ResumeMemoBytes != next.ResumeMemoBytes},
		cliflag.Change{Name: "predict-ttl (on or off; its length is applied)", Differ: (s.PredictTTL > 0) != (next.PredictTTL > 0)},
	)
}

// Flags are the table's and the CBR's flags; env names a flag's KVCA_*
// variable.
func Flags(env func(flag string) []string) []cli.Flag {
	d := DefaultSettings()
	return []cli.Flag{
		&cli.IntFlag{Name: "block-size", Value: d.BlockSize, Usage: "CBR block size in bytes, a positive multiple of 8", EnvVars: env("block-size")},
		&cli.GenericFlag{Name: "ttl", Value: cliflag.Duration(d.TTL), Usage: "forget a cache location idle longer than this", EnvVars: env("ttl")},
		&cli.IntFlag{Name: "max-blocks", Value: d.MaxBlocks, Usage: "hard bound on tracked blocks (about 40 bytes each)", EnvVars: env("max-blocks")},
		&cli.IntFlag{Name: "cbr-memo-bytes", Value: d.CBRMemoBytes, Usage: "memory for strings of 256 bytes or more already canonicalised and hashed, compared instead of hashed again when a request repeats them (0 disables)", EnvVars: env("cbr-memo-bytes")},
		&cli.IntFlag{Name: "resume-memo-bytes", Value: d.ResumeMemoBytes, Usage: "memory for request bodies already canonicalised and where their messages began, so that a request resending an earlier one's bytes (an agent's next turn) is canonicalised and hashed only from what it adds; bounds the bodies' raw bytes, a snapshot every 8 KB of CBR and the buffers kept for reuse, and a body over a quarter of it is not remembered (0: off)", EnvVars: env("resume-memo-bytes")},
		&cli.StringFlag{Name: "hash-key", Usage: "SipHash key, 32 hex digits (replicas must share one); without the flag a random key is drawn at start-up", EnvVars: env("hash-key")},
	}
}

// ExcludeFlags is --cbr-exclude.
func ExcludeFlags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "cbr-exclude", Usage: "extra top-level field to leave out of the CBR (repeatable)", EnvVars: env("cbr-exclude")},
	}
}

// PredictFlags is --predict-ttl.
func PredictFlags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "predict-ttl", Value: cliflag.Duration(10 * time.Second), Usage: "record the chosen backend as holding a request's prefix at routing time, for this long (at most --ttl) unless its answer confirms it (0: learn only from answers)", EnvVars: env("predict-ttl")},
	}
}

// SettingsFrom reads Flags, ExcludeFlags and PredictFlags.
func SettingsFrom(c *cli.Context) Settings {
	return Settings{BlockSize: c.Int("block-size"), TTL: c.Duration("ttl"), MaxBlocks: c.Int("max-blocks"),
		CBRMemoBytes: c.Int("cbr-memo-bytes"), ResumeMemoBytes: c.Int("resume-memo-bytes"), HashKey: c.String("hash-key"), CBRExclude: cliflag.SplitList(c.StringSlice("cbr-exclude")),
		PredictTTL: c.Duration("predict-ttl")}
}
