package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/canon"
	"github.com/kvca/kvca/chain"
	"github.com/kvca/kvca/edge"
	"github.com/kvca/kvca/internal/cliflag"
)

// recorder keeps the CBR for display while hashing it.
type recorder struct {
	cbr []byte
	h   *chain.Hasher
}

func (r *recorder) Write(p []byte) { r.cbr = append(r.cbr, p...); r.h.Write(p) }

func inspectCommand() *cli.Command {
	d := edge.DefaultConfig()
	return &cli.Command{
		Name:  "inspect",
		Usage: "print the CBR, classification and chain of one request body read on stdin",
		Description: `Shows what kvca routes on: the canonical byte representation, whether the
request is a follow-up, and the Merkle chain of its complete blocks. Use the
serve's --hash-key to see the hashes the table holds.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "api", Value: "chat", Usage: "chat, completions, responses or messages"},
			&cli.IntFlag{Name: "block-size", Value: d.Table.BlockSize, Usage: "block size in bytes", EnvVars: env("block-size")},
			&cli.StringFlag{Name: "hash-key", Usage: "32 hex digits; random when empty", EnvVars: env("hash-key")},
			&cli.StringSliceFlag{Name: "cbr-exclude", Usage: "extra top-level field to leave out (repeatable)", EnvVars: env("cbr-exclude")},
		},
		Action: func(c *cli.Context) error {
			api, err := canon.ParseAPI(c.String("api"))
			if err != nil {
				return err
			}
			if err := chain.CheckBlockSize(c.Int("block-size")); err != nil {
				return fmt.Errorf("--block-size: %v", err)
			}
			key := chain.RandomKey()
			if k := c.String("hash-key"); k != "" {
				if key, err = chain.ParseKey(k); err != nil {
					return fmt.Errorf("--hash-key: %v", err)
				}
			}
			body, err := io.ReadAll(os.Stdin)
			if err != nil {
				return err
			}
			rec := &recorder{h: chain.NewHasher(key, c.Int("block-size"))}
			var info canon.Info
			if err := canon.New(cliflag.SplitList(c.StringSlice("cbr-exclude"))).Canonicalize(api, body, rec, &info); err != nil {
				return fmt.Errorf("invalid request: %v", err)
			}
			hashes := make([]string, 0, len(rec.h.Sum()))
			for _, h := range rec.h.Sum() {
				hashes = append(hashes, fmt.Sprintf("%016x", h))
			}
			out := struct {
				API      string   `json:"api"`
				Followup bool     `json:"followup"`
				CBR      string   `json:"cbr"`
				Chain    []string `json:"chain"`
			}{api.String(), info.Followup, string(rec.cbr), hashes}
			enc := json.NewEncoder(os.Stdout)
			enc.SetEscapeHTML(false)
			return enc.Encode(out)
		},
	}
}
