package apikeys

import "github.com/urfave/cli/v2"

// Flags is --api-keys, the keys file; env names a flag's KVCA_* variable.
func Flags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "api-keys", Usage: "require an API key from clients, from this keys `FILE` (lines: sha256:<hex> tenant=<name> [rpm=<n>] [tpm=<n>]; kvca keys hash prints one); re-read when it changes and on SIGHUP", EnvVars: env("api-keys")},
	}
}
