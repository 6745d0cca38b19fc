package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"
)

// configFlag is serve's --config: a YAML file whose keys are flag names.
// Precedence: command line and KVCA_* variables, then the file, then the
// defaults.
var configFlag = &cli.StringFlag{Name: "config", Usage: "YAML `FILE` of settings keyed by flag name (flags and KVCA_* variables win)", EnvVars: env("config")}

// applyConfigFile sets every flag named in the file that the command line
// and environment left unset. Unknown keys are mistakes, reported by name.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %v", err)
	}
	var settings map[string]any
	if err := yaml.Unmarshal(raw, &settings); err != nil {
		return fmt.Errorf("--config %s: %v", path, err)
	}
	names := map[string]bool{}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			names[n] = true
		}
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !names[k] || k == "config" {
			return fmt.Errorf("--config %s: unknown setting %q (keys are flag names, e.g. block-size)", path, k)
		}
		if c.IsSet(k) {
			continue
		}
		vals, err := settingValues(settings[k])
		if err != nil {
			return fmt.Errorf("--config %s: %s: %v", path, k, err)
		}
		for _, v := range vals {
			if err := c.Set(k, v); err != nil {
				return fmt.Errorf("--config %s: %s: %v", path, k, err)
			}
		}
	}
	return nil
}

func settingValues(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return []string{x}, nil
	case bool:
		return []string{strconv.FormatBool(x)}, nil
	case float64:
		return []string{strconv.FormatFloat(x, 'f', -1, 64)}, nil
	case []any:
		var out []string
		for _, e := range x {
			s, err := settingValues(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("value must be a string, number, boolean or list")
}
