package workload

import (
	"fmt"

	"github.com/kvca/kvca/bench/mock"
)

// Ideal is the hit rate of an infinite prefix cache on one engine over the
// bodies actually sent, in the mock engine's units (blockTokens-token
// blocks, rendered and tokenized as the engine does, the last prompt token
// never cached). Block hashes are chained, so a block hits only if the whole
// prefix up to it was seen before.
func Ideal(reqs []Request, blockTokens int) (HitRate, error) {
	return IdealNovel(reqs, blockTokens, nil)
}

// IdealNovel is Ideal that also appends to novel, per request, the prompt
// tokens the infinite cache would still have to compute: a lower bound on
// each request's prefill, whatever the routing.
func IdealNovel(reqs []Request, blockTokens int, novel *[]int) (HitRate, error) {
	var h HitRate
	seen := map[uint64]struct{}{}
	var prompt []byte
	var hashes []uint64
	for i, r := range reqs {
		var err error
		body := r.Body
		if r.Full != nil {
			body = r.Full
		}
		prompt, err = mock.Render(prompt[:0], r.Path, body)
		if err != nil {
			return h, fmt.Errorf("request %d: %w", i, err)
		}
		hashes = mock.BlockHashes(hashes[:0], prompt, blockTokens)
		tokens := mock.Tokens(prompt)
		limit := (tokens - 1) / blockTokens
		n := 0
		for n < len(hashes) && n < limit {
			if _, ok := seen[hashes[n]]; !ok {
				break
			}
			n++
		}
		for _, k := range hashes {
			seen[k] = struct{}{}
		}
		if novel != nil {
			*novel = append(*novel, tokens-n*blockTokens)
		}
		h.QueryTokens += int64(tokens)
		h.HitTokens += int64(n * blockTokens)
	}
	return h, nil
}
