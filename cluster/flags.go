package cluster

import (
	"github.com/urfave/cli/v2"

	"github.com/kvca/kvca/internal/cliflag"
)

// Flags are kvca serve's flags for sharing state between replicas; env
// names a flag's KVCA_* variable.
func Flags(env func(flag string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster-nats", Usage: "NATS `URL` (comma-separated for several) to share learned prefixes and load with the other replicas; empty: run alone", EnvVars: env("cluster-nats")},
		&cli.StringFlag{Name: "cluster-nats-creds", Usage: "NATS credentials `FILE` (JWT and nkey)", EnvVars: env("cluster-nats-creds")},
		&cli.StringFlag{Name: "cluster-nats-nkey", Usage: "NATS nkey seed `FILE`", EnvVars: env("cluster-nats-nkey")},
		&cli.StringFlag{Name: "cluster-nats-user", Usage: "NATS user name", EnvVars: env("cluster-nats-user")},
		&cli.StringFlag{Name: "cluster-nats-password", Usage: "NATS password (prefer the environment variable)", EnvVars: env("cluster-nats-password")},
		&cli.StringFlag{Name: "cluster-nats-token", Usage: "NATS token (prefer the environment variable)", EnvVars: env("cluster-nats-token")},
		&cli.StringFlag{Name: "cluster-nats-tls-ca", Usage: "CA `FILE` to verify the NATS server", EnvVars: env("cluster-nats-tls-ca")},
		&cli.StringFlag{Name: "cluster-nats-tls-cert", Usage: "client certificate `FILE` for NATS mutual TLS", EnvVars: env("cluster-nats-tls-cert")},
		&cli.StringFlag{Name: "cluster-nats-tls-key", Usage: "client key `FILE` for NATS mutual TLS", EnvVars: env("cluster-nats-tls-key")},
		&cli.StringFlag{Name: "cluster-subject", Value: "kvca", Usage: "NATS subject prefix", EnvVars: env("cluster-subject")},
		&cli.StringFlag{Name: "cluster-name", Value: "default", Usage: "replicas with the same subject prefix and name share state", EnvVars: env("cluster-name")},
		&cli.GenericFlag{Name: "cluster-flush-interval", Value: cliflag.Duration(DefaultFlushInterval), Usage: "batch learned prefixes for this long under load (the first after a quiet spell goes at once)", EnvVars: env("cluster-flush-interval")},
		&cli.GenericFlag{Name: "cluster-load-interval", Value: cliflag.Duration(DefaultLoadInterval), Usage: "publish in-flight counts this often; a replica silent for 3 intervals is aged out", EnvVars: env("cluster-load-interval")},
		&cli.GenericFlag{Name: "cluster-refresh", Value: cliflag.Duration(0), DefaultText: "--ttl/4", Usage: "republish a known (prefix, backend) at most this often", EnvVars: env("cluster-refresh")},
	}
}

// OptionsFrom reads Flags; URL is empty when the replica runs alone.
func OptionsFrom(c *cli.Context) Options {
	return Options{
		URL:           c.String("cluster-nats"),
		CredsFile:     c.String("cluster-nats-creds"),
		NKeySeedFile:  c.String("cluster-nats-nkey"),
		User:          c.String("cluster-nats-user"),
		Password:      c.String("cluster-nats-password"),
		Token:         c.String("cluster-nats-token"),
		TLSCA:         c.String("cluster-nats-tls-ca"),
		TLSCert:       c.String("cluster-nats-tls-cert"),
		TLSKey:        c.String("cluster-nats-tls-key"),
		Subject:       c.String("cluster-subject"),
		Name:          c.String("cluster-name"),
		FlushInterval: c.Duration("cluster-flush-interval"),
		LoadInterval:  c.Duration("cluster-load-interval"),
		Refresh:       c.Duration("cluster-refresh"),
	}
}
