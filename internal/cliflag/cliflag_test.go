package cliflag

import (
	"errors"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"10s": 10 * time.Second, "1h30m": 90 * time.Minute, "0": 0, " 250ms ": 250 * time.Millisecond} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("%q: got %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"10":   `"10" needs a unit (e.g. 10s, 5m)`,
		"1.5":  `"1.5" needs a unit (e.g. 10s, 5m)`,
		"ten":  `"ten" is not a duration (e.g. 300ms, 10s, 5m, 1h30m)`,
		"10 s": `"10 s" is not a duration (e.g. 300ms, 10s, 5m, 1h30m)`,
	} {
		if _, err := ParseDuration(in); err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %q", in, err, want)
		}
	}
	v := Duration(time.Minute)
	if err := v.Set("10"); err == nil || v.String() != "1m0s" {
		t.Errorf("a refused Set changed the value to %s (err %v)", v, err)
	}
}

// TestExplain covers the messages of the flag package and urfave/cli as
// they are worded in the versions this module builds with.
func TestExplain(t *testing.T) {
	kinds := map[string]string{"ttl": "duration", "block-size": "int", "time-scale": "number", "pprof": "bool", "policy": "value"}
	for in, want := range map[string]string{
		`invalid value "10" for flag -ttl: "10" needs a unit (e.g. 10s, 5m)`:                                                                              `--ttl: "10" needs a unit (e.g. 10s, 5m)`,
		`invalid value "x" for flag -block-size: parse error`:                                                                                             `--block-size: "x" is not a whole number`,
		`invalid value "99999999999999999999" for flag -block-size: value out of range`:                                                                   `--block-size: "99999999999999999999" is out of range`,
		`invalid boolean value "maybe" for -pprof: parse error`:                                                                                           `--pprof: "maybe" is not true or false`,
		`could not parse "10" from environment variable "KVCA_TTL" as value for flag ttl: "10" needs a unit (e.g. 10s, 5m)`:                               `--ttl (from KVCA_TTL): "10" needs a unit (e.g. 10s, 5m)`,
		`could not parse "x" as int value from environment variable "KVCA_BLOCK_SIZE" for flag block-size: strconv.ParseInt: parsing "x": invalid syntax`: `--block-size (from KVCA_BLOCK_SIZE): "x" is not a whole number`,
		`could not parse "f" as float64 value from environment variable "KVCA_TIME_SCALE" for flag time-scale: x`:                                         `--time-scale (from KVCA_TIME_SCALE): "f" is not a number`,
		`flag provided but not defined: -bakend`:                                                                                                          `unknown flag --bakend (kvca serve --help lists them)`,
		`flag needs an argument: -backend`:                                                                                                                `--backend needs a value`,
		`something else`:                                                                                                                                  `something else`,
	} {
		if got := Explain("kvca serve", kinds, errors.New(in)); got.Error() != want {
			t.Errorf("%s\n got %s\nwant %s", in, got, want)
		}
	}
}
