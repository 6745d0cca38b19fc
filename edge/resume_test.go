package edge

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvca/kvca/canon"
)

// TestResumePlansExactly: with --resume-memo-bytes, each turn of growing
// conversations is planned to the same chain as with 0 (off), the later
// turns resume from the earlier ones, and the resumer shows in metrics.
func TestResumePlansExactly(t *testing.T) {
	t.Parallel()
	key := func(c *Config) { c.Table.HashKey = "000102030405060708090a0b0c0d0e0f"; c.Table.BlockSize = 64 }
	on := offlineCore(t, 2, func(c *Config) { key(c); c.Table.ResumeMemoBytes = 8 << 20 })
	off := offlineCore(t, 2, func(c *Config) { key(c); c.Table.ResumeMemoBytes = 0 })
	for turn := 0; turn < 8; turn++ {
		for conv := 0; conv < 3; conv++ {
			body := []byte(conversation(conv, turn, turn%2 == 0))
			var chains [2][]uint64
			for i, s := range []*Server{on, off} {
				c := testBegin(s, routeChat)
				if err := s.plan(c, canon.Chat, body); err != nil {
					t.Fatal(err)
				}
				chains[i] = slices.Clone(c.req.Chain)
				s.putCall(c)
			}
			if !slices.Equal(chains[0], chains[1]) {
				t.Fatalf("conversation %d turn %d: resumed chain differs from the cold one", conv, turn)
			}
		}
	}
	if st := on.canon.ResumeStats(); st.Hits == 0 || st.Skipped == 0 {
		t.Fatalf("no turn resumed: %+v", st)
	}
	var m strings.Builder
	on.m.set.WritePrometheus(&m)
	if !strings.Contains(m.String(), `kvca_cbr_resume_lookups_total{result="hit"}`) {
		t.Fatal("resumer metrics missing")
	}
	m.Reset()
	off.m.set.WritePrometheus(&m)
	if strings.Contains(m.String(), "kvca_cbr_resume_") {
		t.Fatal("resumer metrics without a resumer")
	}
}
