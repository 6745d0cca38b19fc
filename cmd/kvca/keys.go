package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/apikeys"
)

func keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "manage the API keys file of serve --api-keys",
		Subcommands: []*cli.Command{{
			Name:      "hash",
			Usage:     "print the keys-file line for an API key read from stdin",
			ArgsUsage: " ",
			Description: `Reads one key from stdin (its first line, without surrounding blanks) and
prints the line to add to the keys file: the key's SHA-256, its tenant and
limits. The key itself is never written anywhere; keep it only where the
client needs it. Example:

   printf %s "$KEY" | kvca keys hash --tenant acme --rpm 600 --tpm 200000 >> keys.txt`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "tenant", Required: true, Usage: "tenant `NAME` (1-64 of A-Z a-z 0-9 . _ -)"},
				&cli.Int64Flag{Name: "rpm", Usage: "requests per minute (0: unlimited)"},
				&cli.Int64Flag{Name: "tpm", Usage: "tokens per minute, prompt plus completion (0: unlimited)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return errors.New("keys hash reads the key from stdin, not from its arguments (which shell history and ps would show)")
				}
				line, short, err := keysHashLine(c.App.Reader, c.String("tenant"), c.Int64("rpm"), c.Int64("tpm"))
				if err != nil {
					return err
				}
				if short {
					fmt.Fprintf(c.App.ErrWriter, "kvca: warning: the key is shorter than %d bytes; a digest of a short or guessable key can be reversed by trying keys (make one with: openssl rand -hex 24)\n", minKeyLen)
				}
				_, err = fmt.Fprintln(c.App.Writer, line)
				return err
			},
		}},
	}
}

// minKeyLen is the key length below which keys hash warns: unsalted
// digests are safe to store only for keys too random to guess.
const minKeyLen = 20

// keysHashLine reads a key from r and returns its keys-file line, and
// whether the key is short.
func keysHashLine(r io.Reader, tenant string, rpm, tpm int64) (line string, short bool, err error) {
	if !apikeys.ValidTenant(tenant) {
		return "", false, fmt.Errorf("--tenant %q must be 1-64 of A-Z a-z 0-9 . _ -", tenant)
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"rpm", rpm}, {"tpm", tpm}} {
		if l.v < 0 || l.v > apikeys.MaxLimit {
			return "", false, fmt.Errorf("--%s must be from 0 (unlimited) to %d", l.name, apikeys.MaxLimit)
		}
	}
	key, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", false, fmt.Errorf("reading the key from stdin: %w", err)
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return "", false, errors.New("no key on stdin")
	}
	return apikeys.Line([]byte(key), tenant, rpm, tpm), len(key) < minKeyLen, nil
}
