package mock

// prefixCache is an engine's KV cache: a set of block hashes bounded to
// capacity blocks, evicting the least recently used. Nodes live in one slice
// linked by index so that steady-state caching allocates nothing per block.
type prefixCache struct {
	capacity int
	index    map[uint64]int32
	nodes    []lruNode
	head     int32 // most recently used, -1 when empty
	tail     int32 // least recently used, -1 when empty
}

type lruNode struct {
	key        uint64
	prev, next int32
}

func newPrefixCache(capacityBlocks int) *prefixCache {
	c := &prefixCache{capacity: capacityBlocks}
	c.reset()
	return c
}

func (c *prefixCache) reset() {
	c.index = make(map[uint64]int32, min(c.capacity, 1<<16))
	c.nodes = c.nodes[:0]
	c.head, c.tail = -1, -1
}

func (c *prefixCache) len() int { return len(c.index) }

// match counts the leading blocks of hashes present in the cache, looking at
// no more than limit blocks.
func (c *prefixCache) match(hashes []uint64, limit int) int {
	n := 0
	for n < len(hashes) && n < limit {
		if _, ok := c.index[hashes[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// insert caches all blocks of a prompt. Blocks are touched from the last to
// the first so that the prefix is the most recently used: like vLLM, which
// frees a finished request's blocks tail first, eviction eats prompts from
// their ends and never strands a suffix behind an evicted head.
func (c *prefixCache) insert(hashes []uint64) {
	if c.capacity <= 0 {
		return
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		c.touch(hashes[i])
	}
}

func (c *prefixCache) touch(key uint64) {
	if i, ok := c.index[key]; ok {
		c.unlink(i)
		c.pushFront(i)
		return
	}
	var i int32
	switch {
	case len(c.index) >= c.capacity:
		i = c.tail
		c.unlink(i)
		delete(c.index, c.nodes[i].key)
	default:
		c.nodes = append(c.nodes, lruNode{})
		i = int32(len(c.nodes) - 1)
	}
	c.nodes[i].key = key
	c.index[key] = i
	c.pushFront(i)
}

func (c *prefixCache) unlink(i int32) {
	n := &c.nodes[i]
	if n.prev >= 0 {
		c.nodes[n.prev].next = n.next
	} else {
		c.head = n.next
	}
	if n.next >= 0 {
		c.nodes[n.next].prev = n.prev
	} else {
		c.tail = n.prev
	}
}

func (c *prefixCache) pushFront(i int32) {
	n := &c.nodes[i]
	n.prev, n.next = -1, c.head
	if c.head >= 0 {
		c.nodes[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
}

// keysLRU lists the cached keys from least to most recently used (tests).
func (c *prefixCache) keysLRU() []uint64 {
	var out []uint64
	for i := c.tail; i >= 0; i = c.nodes[i].prev {
		out = append(out, c.nodes[i].key)
	}
	return out
}
